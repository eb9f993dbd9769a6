"""Probe: how much faster the fused and the foreach optimizer steps are than the run's own, here.

Run after the script ends (never during it), only when an optimizer with a fused implementation
ran unfused. It rebuilds the run's optimizer's parameter tensors at their own sizes
(``OptimizerInfo.param_sizes``; the total capped at :data:`MAX_PROBE_VALUES`, each size scaled down
alike beyond it), gives them gradients from a private generator, and times the run's
implementation (per-tensor loop, or foreach) against each other one (``foreach=True``,
``fused=True``), interleaved in rounds. A ratio is the median over rounds of the run's own time
over the other's in the same round, and counts as a gain only when the other won enough rounds
that chance would rarely give as many (a one-sided sign test). The ratios carry this machine's per-tensor
costs (dispatch, vector width, memory traffic, contention included): on a CPU where the fused
kernel is not faster than the run's loop, its ratio is at most 1 and no fix is priced from it.
Beside other busy processes that left fewer free cores than the run's intra-op threads, the caller
times it at the free cores' thread count (``threads``): a per-tensor loop issues ten small ops per
tensor, each meeting the pool's threads at a barrier, and a thread that lost its core to another
process makes every one of them wait, where one fused call waits once. That wait is the other
processes' cost (MACHINE_BUSY's), which the fused kernel would not remove from the job once they
are gone: timed at the pool's full count beside a busy loop, a healthy SGD's loop/fused ratio once
read 1.5x (0.95-1.0x in most such runs); at the free core it read 0.86-0.93x.
"""

from __future__ import annotations

import logging
import time

import torch

from stave import device as dev
from stave.analyze.stats import median, paired_ratio
from stave.measure.config import FUSED_OPTIMIZERS, OptimizerInfo

log = logging.getLogger(__name__)

# Parameter memory the probe may allocate (4 bytes each, x4 with gradient and two Adam moments):
# 8M values is 128 MB at most, enough for per-tensor costs to show, cheap to allocate. Beyond it
# every size shrinks alike: the tensor count (the per-tensor cost) stays, the memory traffic
# shrinks, so the ratio leans toward the dispatch saving on models far larger than the cap.
MAX_PROBE_VALUES = 8_000_000
# Optimizer steps per timed round (fewer where the rounds would not fit the budget), and rounds.
# Each round times every implementation back to back, the order rotating. Best-of-rounds per
# implementation was not enough: beside a busy-loop process, steps of a few milliseconds measured
# 0.5 or 1.4 ms depending on where the scheduler's slices fell, and one lucky round made a kernel
# that is 1.0x here look 1.9-2.6x faster. Paired ratios and a sign test leave such luck at 1.0x.
STEPS_PER_ROUND = 5
ROUNDS = 9
# At least this many rounds run (5 of 5 won: p = 1/32); after them no new round starts past the
# wall-time budget (a loaded machine gets a rougher answer rather than a long wait).
MIN_ROUNDS = 5
BUDGET_S = 1.5
# The other implementation is faster only where it won significantly many rounds (a sign test,
# analyze.stats.SIGN_TEST_P); otherwise its ratio is reported as at most 1 (no gain shown).
_SEED = 20240602


def probe_sizes(opt: OptimizerInfo) -> list[int]:
    """The tensor sizes the probe builds: the run's own, scaled to fit :data:`MAX_PROBE_VALUES`."""
    sizes = [n for n, count in opt.param_sizes for _ in range(count)]
    if not sizes:  # a record from before sizes were kept: equal tensors of the mean size
        tensors = max(1, opt.param_tensors)
        sizes = [max(1, opt.params // tensors)] * tensors
    total = sum(sizes)
    if total > MAX_PROBE_VALUES:
        scale = MAX_PROBE_VALUES / total
        sizes = [max(1, int(n * scale)) for n in sizes]
    return sizes


def _make(opt: OptimizerInfo, sizes: list[int], device: torch.device, gen: torch.Generator,
          **impl: bool) -> torch.optim.Optimizer:
    params = []
    for n in sizes:
        p = torch.nn.Parameter(torch.empty(n, device=device))
        p.grad = torch.randn(n, device=device, generator=gen)
        params.append(p)
    return getattr(torch.optim, opt.type)(params, lr=1e-3, **impl)


def _round_s(optimizer: torch.optim.Optimizer, device: torch.device, steps: int = STEPS_PER_ROUND) -> float:
    """Seconds per step over ``steps`` steps."""
    dev.synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.step()
    dev.synchronize(device)
    return (time.perf_counter() - start) / steps


def run_implementation(opt: OptimizerInfo, device: torch.device) -> str:
    """The implementation the run used: "fused", "foreach" or "loop" (torch's default when unset)."""
    if opt.fused:
        return "fused"
    if opt.foreach is None:
        return "foreach" if dev.is_cuda(device) else "loop"
    return "foreach" if opt.foreach else "loop"


IMPLEMENTATIONS = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def optimizer_ratios(opt: OptimizerInfo, device: "torch.device | str", threads: int | None = None) -> dict[str, float]:
    """The run's step time over each other implementation's here: ``{"fused": r, "foreach": r}``
    (> 1: that one is faster). Empty when not measurable (no fused kernel, already fused).
    ``threads``: the intra-op threads to time them at (None: the current setting), restored after."""
    return optimizer_probe(opt, device, threads)[0]


def optimizer_probe(opt: OptimizerInfo, device: "torch.device | str",
                    threads: int | None = None) -> tuple[dict[str, float], float | None]:
    """:func:`optimizer_ratios`, and the run's own implementation's median step in seconds on the
    probe's tensors (None where not measured): beside other busy processes, the optimizer's time
    at the free cores, where the run's own phase carries its ops' waits at the barrier."""
    if opt.type not in FUSED_OPTIMIZERS or opt.fused:
        return {}, None
    saved = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(max(1, threads))
    try:
        return _ratios(opt, dev.resolve_device(device))
    finally:
        torch.set_num_threads(saved)


def _ratios(opt: OptimizerInfo, device: torch.device) -> tuple[dict[str, float], float | None]:
    gen = torch.Generator(device=device).manual_seed(_SEED)
    own = run_implementation(opt, device)
    sizes = probe_sizes(opt)
    optimizers: dict[str, torch.optim.Optimizer] = {}
    warm_s = 0.0
    for name, impl in IMPLEMENTATIONS.items():
        try:
            optimizers[name] = _make(opt, sizes, device, gen, **impl)
            # One untimed round: state allocation and first-call costs are not the steady state.
            warm_s += _round_s(optimizers[name], device)
        except (RuntimeError, TypeError, ValueError) as exc:
            # A torch build without that implementation for this device/dtype.
            log.debug("optimizer probe: %s %s skipped: %s", opt.type, name, exc)
            optimizers.pop(name, None)
    if own not in optimizers:
        return {}, None
    # Steps per round such that the minimum rounds fit the budget (the warm-up's step times,
    # first-call costs included, over-estimate a step: fewer steps, never more).
    steps = max(1, min(STEPS_PER_ROUND, int(BUDGET_S / (MIN_ROUNDS * max(warm_s, 1e-9)))))
    names = list(optimizers)
    times: dict[str, list[float]] = {name: [] for name in names}
    start = time.perf_counter()
    for r in range(ROUNDS):
        for name in names[r % len(names):] + names[:r % len(names)]:  # none always goes first
            times[name].append(_round_s(optimizers[name], device, steps))
        if r + 1 >= MIN_ROUNDS and time.perf_counter() - start > BUDGET_S:
            break
    return {name: paired_ratio(times[own], t) for name, t in times.items() if name != own}, median(times[own])


def fused_optimizer_ratio(opt: OptimizerInfo, device: "torch.device | str") -> float | None:
    """Step time of ``opt``'s implementation over ``fused=True``'s on this device (None: not measurable)."""
    return optimizer_ratios(opt, device).get("fused")
