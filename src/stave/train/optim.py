"""Switch an optimizer between torch's implementations (for-loop, foreach, fused) without changing its math.

The for-loop implementation launches a few small kernels per parameter tensor; ``foreach`` launches
one per op over a list of tensors; ``fused`` does the whole update in one kernel. All three compute
the same update, so the switch keeps every hyper-parameter and any existing optimizer state.
"""

from __future__ import annotations

import inspect
import logging
from typing import Callable

import torch

from stave.errors import UsageError

log = logging.getLogger(__name__)

# Called with the model (already on its device), so a factory can build parameter groups.
OptimizerFactory = Callable[[torch.nn.Module], torch.optim.Optimizer]


def supported_impls(optimizer: torch.optim.Optimizer) -> tuple[str, ...]:
    """The implementations this optimizer's class accepts ("default" always)."""
    params = inspect.signature(type(optimizer).__init__).parameters
    return ("default",) + tuple(name for name in ("foreach", "fused") if name in params)


def with_impl(optimizer: torch.optim.Optimizer, impl: str) -> torch.optim.Optimizer:
    """An optimizer of the same class, groups and state, using implementation ``impl``.

    ``impl`` is "default" (returned unchanged), "foreach" or "fused". Raises
    :class:`~stave.errors.UsageError` when the optimizer class has no such implementation.
    """
    if impl == "default":
        return optimizer
    if impl not in supported_impls(optimizer):
        raise UsageError(f"{type(optimizer).__name__} has no {impl} implementation; use optimizer_impl='default'")
    flags = {"foreach": impl == "foreach", "fused": impl == "fused"}
    groups = [{**group, **flags} for group in optimizer.param_groups]
    accepted = inspect.signature(type(optimizer).__init__).parameters
    # defaults may hold derived entries the constructor does not take (AdamW's decoupled_weight_decay).
    defaults = {k: v for k, v in optimizer.defaults.items() if k not in flags and k in accepted}
    try:
        rebuilt = type(optimizer)(groups, **defaults, **flags)
    except (RuntimeError, ValueError, TypeError) as exc:
        # torch refuses fused for some devices/dtypes (e.g. fp64 parameters): say so plainly.
        raise UsageError(f"{type(optimizer).__name__}({impl}=True) is not available here: {exc}") from exc
    if optimizer.state:
        rebuilt.load_state_dict(optimizer.state_dict())
        for group in rebuilt.param_groups:
            group.update(flags)
    return rebuilt


def current_impl(optimizer: torch.optim.Optimizer) -> str:
    """ "fused", "foreach" or "default", as the optimizer's first group is set."""
    group = optimizer.param_groups[0] if optimizer.param_groups else {}
    if group.get("fused"):
        return "fused"
    if group.get("foreach"):
        return "foreach"
    return "default"
