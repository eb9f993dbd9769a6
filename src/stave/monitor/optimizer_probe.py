"""Probe: how much faster a fused optimizer step is than the run's own implementation, here.

Run after the script ends (never during it), only when an optimizer with a fused implementation
ran unfused. It builds as many parameter tensors as the run's optimizer had (their total size
capped), gives them gradients from a private generator, and times the run's implementation
(per-tensor loop, or foreach) against ``fused=True``, interleaved, best of a few rounds. The ratio
carries this machine's per-op costs, contention included, which the bare-dispatch probe misses.
"""

from __future__ import annotations

import logging
import time

import torch

from stave import device as dev
from stave.measure.config import FUSED_OPTIMIZERS, OptimizerInfo

log = logging.getLogger(__name__)

# Parameter memory the probe may allocate (4 bytes each, x4 with gradient and two Adam moments):
# 8M values is 128 MB at most, enough for per-tensor costs to show, cheap to allocate.
MAX_PROBE_VALUES = 8_000_000
# Optimizer steps per timed round and rounds per implementation (the best round is kept: slower
# ones met interference from other processes).
STEPS_PER_ROUND = 5
ROUNDS = 3
# Wall-time budget: after the first round pair, no new round starts past it (a loaded machine gets
# a rougher answer rather than a long wait at the end of the run).
BUDGET_S = 1.0
_SEED = 20240602


def _make(opt: OptimizerInfo, device: torch.device, gen: torch.Generator, **impl: bool) -> torch.optim.Optimizer:
    tensors = max(1, opt.param_tensors)
    per_tensor = max(1, min(opt.params, MAX_PROBE_VALUES) // tensors)
    params = []
    for _ in range(tensors):
        p = torch.nn.Parameter(torch.empty(per_tensor, device=device))
        p.grad = torch.randn(per_tensor, device=device, generator=gen)
        params.append(p)
    return getattr(torch.optim, opt.type)(params, lr=1e-3, **impl)


def _round_s(optimizer: torch.optim.Optimizer, device: torch.device) -> float:
    dev.synchronize(device)
    start = time.perf_counter()
    for _ in range(STEPS_PER_ROUND):
        optimizer.step()
    dev.synchronize(device)
    return (time.perf_counter() - start) / STEPS_PER_ROUND


def fused_optimizer_ratio(opt: OptimizerInfo, device: "torch.device | str") -> float | None:
    """Step time of ``opt``'s implementation over ``fused=True``'s on this device (None: not measurable)."""
    if opt.type not in FUSED_OPTIMIZERS or opt.fused:
        return None
    device = dev.resolve_device(device)
    gen = torch.Generator(device=device).manual_seed(_SEED)
    # The run's own implementation: foreach as it was set, torch's default (foreach on CUDA) when None.
    baseline = {"foreach": bool(opt.foreach) if opt.foreach is not None else dev.is_cuda(device)}
    try:
        loop = _make(opt, device, gen, **baseline)
        fused = _make(opt, device, gen, fused=True)
        # One untimed step each: state allocation and first-call costs are not the steady state.
        _round_s(loop, device)
        _round_s(fused, device)
        loop_s, fused_s = float("inf"), float("inf")
        start = time.perf_counter()
        for _ in range(ROUNDS):
            loop_s = min(loop_s, _round_s(loop, device))
            fused_s = min(fused_s, _round_s(fused, device))
            if time.perf_counter() - start > BUDGET_S:
                break
    except (RuntimeError, TypeError, ValueError) as exc:
        # A torch build without the fused kernel for this device/dtype.
        log.debug("fused optimizer probe skipped: %s", exc)
        return None
    return loop_s / fused_s if fused_s > 0 else None
