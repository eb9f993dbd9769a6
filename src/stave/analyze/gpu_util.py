"""The GPU's utilization over the counted steps, from NVML readings that describe the past.

NVML's utilization is the share of its *last sample period* in which a kernel ran; the period is
between 1/6 s and 1 s, by product. A reading taken during a counted step therefore describes up to
a second before it: in a short run, the warm-up, the model's construction or an idle GPU. On a lent
H200 (session 22), a bf16 MLP that kept the GPU busy through all of its 35 counted steps (0.1 s)
read 0 %, and NO_COMPILE then priced "the GPU 100 % idle" at 1.14x on a healthy loop.

Only readings whose whole period lies inside the counted steps describe them. The period is bounded
from the readings themselves: the value changes at most once a period, so two successive changes
seen ``gap`` seconds apart by a sampler that reads every ``interval`` seconds put the period under
``gap + interval``; without two changes, NVML's documented maximum (1 s) holds. Where no reading
qualifies, the utilization is unknown (``None``), never a number from outside the steps.
"""

from __future__ import annotations

from dataclasses import dataclass

from stave.analyze.stats import median
from stave.measure.record import RunRecord

# NVML documents the utilization's sample period as between 1/6 s and 1 s, depending on the product.
NVML_MAX_PERIOD_S = 1.0


@dataclass(frozen=True)
class GpuUtilWindow:
    """The utilization the counted steps can be given, and why it may be missing."""

    util_pct: float | None  # median of the readings whose period lies inside the counted steps
    readings: int  # how many readings that is
    period_s: float  # the sample period bound used (seconds)
    window_s: float  # the counted steps' span (seconds)


def period_bound_s(times_s: list[float], values: list[float]) -> float:
    """An upper bound of NVML's sample period from successive readings (times ascending)."""
    if len(times_s) < 3:
        return NVML_MAX_PERIOD_S
    interval = median([b - a for a, b in zip(times_s, times_s[1:])])
    changes = [t for t, prev, cur in zip(times_s[1:], values, values[1:]) if cur != prev]
    gaps = [b - a for a, b in zip(changes, changes[1:])]
    if not gaps:
        return NVML_MAX_PERIOD_S
    return min(NVML_MAX_PERIOD_S, min(gaps) + interval)


def gpu_util_window(record: RunRecord) -> GpuUtilWindow | None:
    """The GPU utilization over ``record``'s counted steps; None when there are no GPU readings."""
    readings = [(h.t_ns / 1e9, float(h.gpu_util_pct)) for h in record.host if h.gpu_util_pct is not None]
    counted = record.counted_steps()
    if not readings or not counted:
        return None
    readings.sort()
    period = period_bound_s([t for t, _ in readings], [v for _, v in readings])
    start_s = min(s.start_ns for s in counted) / 1e9
    end_s = max(s.end_ns for s in counted) / 1e9
    inside = [v for t, v in readings if t - period >= start_s and t <= end_s]
    return GpuUtilWindow(median(inside) if inside else None, len(inside), period, end_s - start_s)
