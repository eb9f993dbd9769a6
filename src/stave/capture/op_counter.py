"""Counts aten ops and FLOPs by phase over one of the user's own warm-up steps.

A ``TorchDispatchMode`` that runs every op unchanged (no decomposition, so the numbers the
user's step computes are bit-identical) and adds the op's FLOPs from PyTorch's own formula
registry (``torch.utils.flop_counter``). It slows the step it watches, which is why that step is
left out of the statistics.

Attention is counted apart: the ``scaled_dot_product_attention`` kernel the dispatcher chose
(flash / memory-efficient / cuDNN; the math path shows as batched matmuls) and the FLOPs of
attention-shaped work (those kernels and batched matmuls, which is what eager attention runs), the
part of the model whose cost grows with the square of the sequence length. PyTorch has no FLOP
formula for the CPU flash kernel; :func:`cpu_flash_flops` supplies it.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

log = logging.getLogger(__name__)

# Ops whose work is a matrix product (convolutions as their im2col GEMM): their shapes are what a
# precision change speeds up, so the probes time these shapes rather than one generic GEMM.
_GEMM_OPS = {
    torch.ops.aten.mm.default: "mm",
    torch.ops.aten.addmm.default: "addmm",
    torch.ops.aten.bmm.default: "bmm",
    torch.ops.aten.baddbmm.default: "baddbmm",
    torch.ops.aten.convolution.default: "conv",
    torch.ops.aten.convolution_backward.default: "conv_bwd",
}


def _prod(values: Any) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def gemm_dims(kind: str, args: Any, out: Any) -> tuple[int, int, int, int] | None:
    """(batch, m, n, k) of the matrix product an op computes; ``None`` when the shapes do not say."""
    try:
        if kind == "mm":
            a, b = args[0], args[1]
            return 1, int(a.shape[0]), int(b.shape[1]), int(a.shape[1])
        if kind == "addmm":
            a, b = args[1], args[2]
            return 1, int(a.shape[0]), int(b.shape[1]), int(a.shape[1])
        if kind in ("bmm", "baddbmm"):
            a, b = (args[0], args[1]) if kind == "bmm" else (args[1], args[2])
            return int(a.shape[0]), int(a.shape[1]), int(b.shape[2]), int(a.shape[2])
        if kind in ("conv", "conv_bwd"):
            # im2col: rows are output positions, columns output channels, depth the receptive field.
            weight = args[1] if kind == "conv" else args[2]
            result = out if kind == "conv" else args[0]
            groups = int(args[8]) if kind == "conv" else int(args[9])
            n_out = _prod(result.shape[2:]) * int(result.shape[0])
            return groups, n_out, int(weight.shape[0]) // max(groups, 1), _prod(weight.shape[1:])
    except (AttributeError, IndexError, TypeError, ValueError):
        return None
    return None


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


# Batched matmuls: eager attention's QK^T and AV (linear layers run as mm/addmm).
_BATCHED_MATMUL = {torch.ops.aten.bmm, torch.ops.aten.baddbmm}
SDPA_MARK = "scaled_dot_product"


def cpu_flash_flops(args: Any, backward: bool) -> int:
    """FLOPs of the CPU flash-attention kernel: two matmuls forward (QK^T, AV), four backward."""
    q, k, v = args[0], args[1], args[2]
    if backward:  # (grad_out, q, k, v, ...)
        q, k, v = args[1], args[2], args[3]
    batch_heads = q.numel() // (q.shape[-2] * q.shape[-1])
    forward = 2 * batch_heads * q.shape[-2] * k.shape[-2] * (q.shape[-1] + v.shape[-1])
    return int(2 * forward if backward else forward)


class OpCounter(TorchDispatchMode):
    """Counts ops and FLOPs, keyed by the phase ``phase_fn()`` reports at each op."""

    def __init__(self, phase_fn: Callable[[], str]) -> None:
        super().__init__()
        self.phase_fn = phase_fn
        self.ops: Counter[str] = Counter()
        self.flops: Counter[str] = Counter()
        self.attention_flops: Counter[str] = Counter()
        self.sdpa_kernels: Counter[str] = Counter()
        # FLOPs per matrix-product shape (batch, m, n, k), all phases together.
        self.gemm_flops: Counter[tuple[int, int, int, int]] = Counter()
        self.formula_errors = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in _IGNORED:
            return out
        phase = self.phase_fn()
        self.ops[phase] += 1
        packet = func._overloadpacket
        name = packet.__name__
        formula = flop_registry.get(packet)
        flops = 0
        try:
            if formula is not None:
                flops = int(formula(*args, **kwargs, out_val=out))
            elif name.startswith("_scaled_dot_product_flash_attention_for_cpu"):
                flops = cpu_flash_flops(args, backward=name.endswith("backward"))
        except (TypeError, ValueError, RuntimeError, IndexError, AttributeError):
            # An op called with a signature the formula does not cover: count the op, not its FLOPs.
            self.formula_errors += 1
        self.flops[phase] += flops
        kind = _GEMM_OPS.get(func)
        dims = gemm_dims(kind, args, out) if kind is not None and flops else None
        if dims is not None:
            self.gemm_flops[dims] += flops
        if SDPA_MARK in name:
            if not name.endswith("backward"):
                self.sdpa_kernels[name.lstrip("_")] += 1
            self.attention_flops[phase] += flops
        elif packet in _BATCHED_MATMUL:
            self.attention_flops[phase] += flops
        return out

    def top_gemms(self, share: float, limit: int) -> list[list[int]]:
        """The shapes holding ``share`` of the matrix-product FLOPs (at most ``limit``), largest
        first, each as ``[batch, m, n, k, flops_per_step]``."""
        total = sum(self.gemm_flops.values())
        out: list[list[int]] = []
        covered = 0
        for dims, flops in self.gemm_flops.most_common(limit):
            if total and covered >= share * total:
                break
            out.append([*dims, int(flops)])
            covered += flops
        return out
