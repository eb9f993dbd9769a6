"""Memory over the run: is it growing with every step (a leak) or settling (caches warming up)?

A leak adds about the same bytes at every step, so memory against step index is a straight line
whose slope does not fade; warm-up growth (allocator pools, lazily built caches) flattens out. The
fit runs over the samples taken during counted steps only.

The steps' own RSS readings (``StepRecord.rss_bytes``) are not used for the fit: over a run of a
few dozen fast steps a cache filling up (a variable-length batch's allocator and kernel caches:
+438 MB in a straight line over 35 steps of a healthy padded-batch script, flat after 70) cannot
be told from a leak, and the sampler's second of samples is what shows the line bending.
"""

from __future__ import annotations

from dataclasses import dataclass

from stave.analyze.host import samples_in_counted_steps
from stave.analyze.stats import linear_fit
from stave.measure.record import RunRecord

# Fewer points than this cannot tell a line from noise (at ~10 Hz: under a second of samples).
MIN_TREND_SAMPLES = 8


@dataclass
class MemoryTrend:
    """A least-squares line through one memory counter (bytes) against step index and time."""

    counter: str
    samples: int
    steps_spanned: int
    start_bytes: float
    end_bytes: float
    bytes_per_step: float
    bytes_per_s: float
    r_squared: float
    first_half_bytes_per_step: float
    second_half_bytes_per_step: float

    @property
    def growth_bytes(self) -> float:
        """Growth along the fitted line over the steps spanned."""
        return self.bytes_per_step * self.steps_spanned


def memory_trend(record: RunRecord, counter: str = "rss_bytes") -> MemoryTrend | None:
    """Fit ``counter`` (a :class:`~stave.measure.host.HostSample` field) over the counted steps.

    ``None`` when the counter is absent or too few samples carry it.
    """
    points = [
        (s.step, s.t_ns, float(getattr(s, counter)))
        for s in samples_in_counted_steps(record)
        if getattr(s, counter) is not None
    ]
    if len(points) < MIN_TREND_SAMPLES:
        return None
    points.sort(key=lambda p: p[1])
    steps = [float(p[0]) for p in points]
    times = [p[1] / 1e9 for p in points]
    values = [p[2] for p in points]
    intercept, slope_step, r2 = linear_fit(steps, values)
    _a, slope_time, _r2 = linear_fit(times, values)
    half = len(points) // 2
    _a1, first, _r1 = linear_fit(steps[:half], values[:half])
    _a2, second, _r2b = linear_fit(steps[half:], values[half:])
    return MemoryTrend(
        counter=counter,
        samples=len(points),
        steps_spanned=int(max(steps) - min(steps)),
        start_bytes=intercept + slope_step * min(steps),
        end_bytes=intercept + slope_step * max(steps),
        bytes_per_step=slope_step,
        bytes_per_s=slope_time,
        r_squared=r2,
        first_half_bytes_per_step=first,
        second_half_bytes_per_step=second,
    )
