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

from stave.analyze.stats import hypergeometric_tail, mad, median
from stave.measure.steps import PHASES, StepRecord

# A stall adds at least half a median step to one phase at once; jitter moves a phase by tens of
# percent of the step at most.
OUTLIER_MIN_EXCESS_SHARE = 0.5
# ... and exceeds the phase's median by this many scaled MADs (1.4826 x MAD estimates a normal
# standard deviation; 5 of them leaves about one step in a million of ordinary jitter above).
OUTLIER_MAD_K = 5.0
MAD_TO_SIGMA = 1.4826
# Outliers are periodic when one rhythm (every p steps, at offset r) holds so many of them that
# random stalls would land there that often less than 5 % of the time, counting every rhythm
# tried (a Bonferroni bound). Comparing the gaps between stalls was not enough: four stalls of a
# busy machine at steps 7, 8, 13, 18 share the gap 5 twice and read as "every 5 steps".
PERIOD_P = 0.05
# A rhythm is seen at least this often (two stalls are a coincidence, not a beat).
PERIOD_MIN_HITS = 3
# The phases a stall is looked for in (data waits are the input-pipeline findings', see above).
STALL_PHASES: tuple[str, ...] = tuple(p for p in PHASES if p != "data_wait")


@dataclass
class OutlierSteps:
    """The stalled steps among the counted ones and what the stalls cost.

    ``excess_by_phase_s``: per phase, the time the stalled steps spent beyond that phase's median
    in the phases that stalled; ``excess_s`` is their sum: the time removing the stalls gives back;
    ``excess_by_step_s``: the same excess per stalled step index.
    """

    counted: int
    median_s: float
    indices: list[int] = field(default_factory=list)
    excess_s: float = 0.0
    excess_by_phase_s: dict[str, float] = field(default_factory=dict)
    excess_by_step_s: dict[int, float] = field(default_factory=dict)
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


def stall_limit(values: Sequence[float], step_median_s: float) -> tuple[float, float]:
    """(median, the value above which a phase stalled) of one phase's per-step seconds: half a median
    step and :data:`OUTLIER_MAD_K` scaled MADs above its median."""
    p_med = median(values)
    return p_med, p_med + max(OUTLIER_MIN_EXCESS_SHARE * step_median_s, OUTLIER_MAD_K * MAD_TO_SIGMA * mad(values))


def find_outliers(steps: Sequence[StepRecord]) -> OutlierSteps:
    """Find the stalled steps among the counted ``steps``."""
    counted = [s for s in steps if s.counted]
    med = median([s.duration_ns / 1e9 for s in counted])
    out = OutlierSteps(counted=len(counted), median_s=med, excess_by_phase_s={p: 0.0 for p in STALL_PHASES})
    if len(counted) < 3:
        return out
    limits = {p: stall_limit([s.phase_ns(p) / 1e9 for s in counted], med) for p in STALL_PHASES}
    for s in counted:
        excess = 0.0
        stalled = False
        for p in STALL_PHASES:
            value = s.phase_ns(p) / 1e9
            p_med, limit = limits[p]
            if value > limit:
                out.excess_by_phase_s[p] += value - p_med
                excess += value - p_med
                stalled = True
        if stalled:
            out.indices.append(s.index)
            out.excess_by_step_s[s.index] = excess
    out.excess_s = sum(out.excess_by_phase_s.values())
    out.period_steps = period_steps(out.indices, [s.index for s in counted])
    return out


def period_steps(stalled: list[int], counted: list[int]) -> int | None:
    """The rhythm of the ``stalled`` step indices among the ``counted`` ones, or ``None``.

    For each period p and offset r, the chance that the stalls, placed at random among the counted
    steps, put as many on the steps ``index % p == r`` as they did (a hypergeometric tail). The
    least likely rhythm is the period when even that chance, times the rhythms tried, is below
    :data:`PERIOD_P`.
    """
    stalled_set = set(stalled)
    if len(stalled_set) < PERIOD_MIN_HITS or len(counted) < 2 * PERIOD_MIN_HITS:
        return None
    n, k = len(counted), len(stalled_set)
    best: tuple[float, int] | None = None
    tried = 0
    for p in range(2, n // (PERIOD_MIN_HITS - 1) + 1):
        tried += p
        hits = Counter(i % p for i in stalled_set)
        offsets = [r for r, h in hits.items() if h >= PERIOD_MIN_HITS]
        if not offsets:
            continue  # the common case for long periods: the beats need not be counted (O(n) each)
        beats = Counter(i % p for i in counted)
        for r in offsets:
            h = hits[r]
            chance = hypergeometric_tail(n, beats[r], k, h)
            if best is None or chance < best[0]:
                best = (chance, p)
    if best is None or best[0] * tried >= PERIOD_P:
        return None
    return best[1]
