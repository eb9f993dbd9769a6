"""Steps much slower than the typical step, which phase they lost their time in, and their rhythm.

A checkpoint every N steps, a validation pass, a log flush or a garbage-collection pause shows as
a few steps far above the median. The typical step is the median and its spread the median
absolute deviation, so the outliers themselves cannot inflate the yardstick that finds them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from stave.analyze.stats import mad, median
from stave.measure.steps import PHASES, StepRecord

# A step is an outlier only when it is this many times the median: jitter of a loaded machine
# stays within tens of percent, a stall from I/O or a checkpoint is a multiple of the step.
OUTLIER_MIN_RATIO = 1.5
# ... and this many scaled MADs above it (1.4826 x MAD estimates a normal standard deviation;
# 5 of them leaves about one step in a million of ordinary jitter above the line).
OUTLIER_MAD_K = 5.0
MAD_TO_SIGMA = 1.4826
# Outliers are periodic when this share of the gaps between them is the same number of steps.
PERIOD_MIN_SHARE = 0.6


@dataclass
class OutlierSteps:
    """The outlier steps among the counted ones and what they cost beyond a median step."""

    counted: int
    median_s: float
    threshold_s: float
    indices: list[int] = field(default_factory=list)
    excess_s: float = 0.0
    excess_by_phase_s: dict[str, float] = field(default_factory=dict)
    period_steps: int | None = None

    @property
    def excess_per_step_s(self) -> float:
        """The outliers' excess spread over every counted step (what the mean step pays)."""
        return self.excess_s / self.counted if self.counted else 0.0

    def dominant_phase(self) -> str | None:
        """The phase that holds most of the excess."""
        if not self.excess_by_phase_s:
            return None
        return max(self.excess_by_phase_s, key=lambda p: self.excess_by_phase_s[p])


def find_outliers(steps: Sequence[StepRecord]) -> OutlierSteps:
    """Find outlier steps among the counted ``steps``."""
    counted = [s for s in steps if s.counted]
    durations = [s.duration_ns / 1e9 for s in counted]
    med = median(durations)
    spread = MAD_TO_SIGMA * mad(durations)
    threshold = max(med * OUTLIER_MIN_RATIO, med + OUTLIER_MAD_K * spread)
    out = OutlierSteps(counted=len(counted), median_s=med, threshold_s=threshold)
    if not counted:
        return out
    phase_medians = {p: median([s.phase_ns(p) / 1e9 for s in counted]) for p in PHASES}
    slow = [s for s in counted if s.duration_ns / 1e9 > threshold]
    out.indices = [s.index for s in slow]
    out.excess_s = sum(s.duration_ns / 1e9 - med for s in slow)
    for p in PHASES:
        out.excess_by_phase_s[p] = sum(max(0.0, s.phase_ns(p) / 1e9 - phase_medians[p]) for s in slow)
    out.period_steps = _period(out.indices)
    return out


def _period(indices: list[int]) -> int | None:
    if len(indices) < 3:
        return None
    gaps = [b - a for a, b in zip(indices, indices[1:])]
    gap, n = Counter(gaps).most_common(1)[0]
    return gap if gap > 1 and n / len(gaps) >= PERIOD_MIN_SHARE else None
