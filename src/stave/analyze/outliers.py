"""Steps that stall: which phase lost the time, how much, and on what rhythm.

A checkpoint every N steps, a validation pass, a log flush or a garbage-collection pause makes a
few steps much slower than the rest. The stall lands in one phase (``other`` for a checkpoint),
which is otherwise steady, so outliers are found per phase: a
step stalls when one of its phases exceeds that phase's median by a good part of a whole step
*and* by many times the phase's own spread. The median and the median absolute deviation are
the yardsticks, so the stalls themselves cannot inflate them; a loaded machine's jitter, spread
over all phases and steps, stays below them.

Waits for data are left out: with several loader workers they alternate between steps by design
(one batch is ready, the next is late), epoch starts with fresh workers wait on purpose, and the
input-pipeline findings account for both.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from stave.analyze.stats import mad, median
from stave.measure.steps import PHASES, StepRecord

# A stall adds at least half a median step to one phase at once; jitter moves a phase by tens of
# percent of the step at most.
OUTLIER_MIN_EXCESS_SHARE = 0.5
# ... and exceeds the phase's median by this many scaled MADs (1.4826 x MAD estimates a normal
# standard deviation; 5 of them leaves about one step in a million of ordinary jitter above).
OUTLIER_MAD_K = 5.0
MAD_TO_SIGMA = 1.4826
# Outliers are periodic when this share of the gaps between them is the same number of steps.
PERIOD_MIN_SHARE = 0.6
# The phases a stall is looked for in (data waits are the input-pipeline findings', see above).
STALL_PHASES: tuple[str, ...] = tuple(p for p in PHASES if p != "data_wait")


@dataclass
class OutlierSteps:
    """The stalled steps among the counted ones and what the stalls cost.

    ``excess_by_phase_s``: per phase, the time the stalled steps spent beyond that phase's median
    in the phases that stalled; ``excess_s`` is their sum: the time removing the stalls gives back.
    """

    counted: int
    median_s: float
    indices: list[int] = field(default_factory=list)
    excess_s: float = 0.0
    excess_by_phase_s: dict[str, float] = field(default_factory=dict)
    period_steps: int | None = None

    @property
    def excess_per_step_s(self) -> float:
        """The stalls' excess spread over every counted step (what the mean step pays)."""
        return self.excess_s / self.counted if self.counted else 0.0

    def dominant_phase(self) -> str | None:
        """The phase that holds most of the excess."""
        if not self.excess_by_phase_s or self.excess_s <= 0:
            return None
        return max(self.excess_by_phase_s, key=lambda p: self.excess_by_phase_s[p])


def find_outliers(steps: Sequence[StepRecord]) -> OutlierSteps:
    """Find the stalled steps among the counted ``steps``."""
    counted = [s for s in steps if s.counted]
    med = median([s.duration_ns / 1e9 for s in counted])
    out = OutlierSteps(counted=len(counted), median_s=med, excess_by_phase_s={p: 0.0 for p in STALL_PHASES})
    if len(counted) < 3:
        return out
    limits: dict[str, tuple[float, float]] = {}
    for p in STALL_PHASES:
        values = [s.phase_ns(p) / 1e9 for s in counted]
        p_med = median(values)
        limits[p] = (p_med, p_med + max(OUTLIER_MIN_EXCESS_SHARE * med, OUTLIER_MAD_K * MAD_TO_SIGMA * mad(values)))
    for s in counted:
        stalled = False
        for p in STALL_PHASES:
            value = s.phase_ns(p) / 1e9
            p_med, limit = limits[p]
            if value > limit:
                out.excess_by_phase_s[p] += value - p_med
                stalled = True
        if stalled:
            out.indices.append(s.index)
    out.excess_s = sum(out.excess_by_phase_s.values())
    out.period_steps = _period(out.indices)
    return out


def _period(indices: list[int]) -> int | None:
    if len(indices) < 3:
        return None
    gaps = [b - a for a, b in zip(indices, indices[1:])]
    gap, n = Counter(gaps).most_common(1)[0]
    return gap if gap > 1 and n / len(gaps) >= PERIOD_MIN_SHARE else None
