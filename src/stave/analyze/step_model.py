"""What-if estimates: the step time T' if only the part a fix addresses changed.

Every finding's ``est_speedup`` is ``T / T'``. These functions hold the few models the rules share,
so each docs page can state its formula once and the code computes exactly that:

- a phase made ``r`` times faster (bf16 compute, fewer threads fighting over cores);
- the input pipeline run by ``W`` workers alongside the compute, bounded by the cores;
- a fixed per-step cost amortized over a batch ``k`` times larger.
"""

from __future__ import annotations

from stave.analyze.breakdown import StepSummary


def speedup(t_s: float, t_new_s: float) -> float:
    """``T / T'``, never below 1.0 (a fix is not estimated to slow the step) and 1.0 when undefined."""
    if t_s <= 0 or t_new_s <= 0:
        return 1.0
    return max(1.0, t_s / t_new_s)


def phase_s(summary: StepSummary, phase: str) -> float:
    """A phase's seconds in a median step: its time-weighted share times the median step time.

    Shares add up to 1, so phases computed this way add up to the median step: estimates that
    shrink one phase stay consistent with ``T`` being the median.
    """
    return summary.breakdown.get(phase, 0.0) * summary.step_time_median_s


def scale_phases(summary: StepSummary, factors: dict[str, float]) -> float:
    """T' when each named phase runs ``factor`` times faster (factor > 1 shrinks it)."""
    t = summary.step_time_median_s
    saved = sum(phase_s(summary, p) * (1.0 - 1.0 / f) for p, f in factors.items() if f > 0)
    return max(t - saved, 0.0)


def pipelined_step_s(
    compute_wall_s: float,
    compute_cpu_s: float,
    load_wall_s: float,
    load_cpu_s: float,
    workers: int,
    cores: float,
) -> float:
    """Step time with loading done by ``workers`` processes alongside the compute.

    Three bounds, the largest wins: the compute itself (loading fully hidden), the workers'
    throughput (each produces one step's samples in ``load_wall_s``), and the machine (compute and
    loading share ``cores``: their CPU-seconds per step cannot exceed cores x step time).
    """
    workers = max(1, workers)
    cores = max(1.0, cores)
    return max(compute_wall_s, load_wall_s / workers, (compute_cpu_s + load_cpu_s) / cores)


def amortized_speedup(fixed_share: float, growth: float) -> float:
    """Samples/s gain when the batch grows ``growth`` times and a ``fixed_share`` of the step does not.

    Per sample, the step costs ``fixed + variable``; with a batch ``k`` times larger it costs
    ``fixed / k + variable``: speedup = 1 / (fixed_share / k + 1 - fixed_share).
    """
    fixed_share = min(max(fixed_share, 0.0), 1.0)
    if growth <= 1:
        return 1.0
    return 1.0 / (fixed_share / growth + 1.0 - fixed_share)
