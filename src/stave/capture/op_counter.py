"""Counts aten ops and FLOPs by phase over one of the user's own warm-up steps.

A ``TorchDispatchMode`` that runs every op unchanged (no decomposition, so the numbers the
user's step computes are bit-identical) and adds the op's FLOPs from PyTorch's own formula
registry (``torch.utils.flop_counter``). It slows the step it watches, which is why that step is
left out of the statistics.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

log = logging.getLogger(__name__)

# Metadata queries are not work; counting them would inflate "ops per step".
_IGNORED = {
    torch.ops.aten.size.default,
    torch.ops.aten.stride.default,
    torch.ops.aten.sym_size.default,
    torch.ops.aten.sym_stride.default,
    torch.ops.aten.numel.default,
    torch.ops.aten.dim.default,
    torch.ops.aten.is_contiguous.default,
    torch.ops.prim.layout.default,
}


class OpCounter(TorchDispatchMode):
    """Counts ops and FLOPs, keyed by the phase ``phase_fn()`` reports at each op."""

    def __init__(self, phase_fn: Callable[[], str]) -> None:
        super().__init__()
        self.phase_fn = phase_fn
        self.ops: Counter[str] = Counter()
        self.flops: Counter[str] = Counter()
        self.formula_errors = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in _IGNORED:
            return out
        phase = self.phase_fn()
        self.ops[phase] += 1
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            try:
                self.flops[phase] += int(formula(*args, **kwargs, out_val=out))
            except (TypeError, ValueError, RuntimeError, IndexError):
                # An op called with a signature the formula does not cover: count the op, not its FLOPs.
                self.formula_errors += 1
        return out
