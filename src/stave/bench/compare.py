"""Interleaved A/B timing and the noise-aware keep/revert decision.

Two sessions are warmed up, then timed in alternating windows, A B then B A (ABBA), so a change
in machine load between pairs hits both sides equally. Each pair gives a ratio B/A from two
adjacent windows. The comparison is the median of the pair ratios with a distribution-free
interval around it (order statistics, as the sign test gives them): B is kept only when the
interval's lower end is above ``1 + MIN_GAIN``. While the answer is open and the median points
to a gain, more pairs are timed, up to ``max_pairs``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from stave.analyze.stats import median, relative_spread
from stave.bench.session import Session, Window
from stave.errors import UsageError

# A change is kept only above this gain: smaller ones are not worth a setting the user must
# carry, and are below what interleaved windows resolve on a shared machine.
MIN_GAIN = 0.02
# The floor: every rate is the median of at least this many windows.
MIN_PAIRS = 3
# One-sided error the interval allows: a change with no effect is kept with at most this
# probability once there are 4 or more pairs (3 pairs can only give 12.5%: all three above).
ALPHA = 0.10


@dataclass(frozen=True)
class TimingPlan:
    """How long to warm up and time: ``pairs`` windows per side (>= 3), extended up to
    ``max_pairs`` while undecided; each window runs >= ``min_steps`` steps and >= ``min_s`` s."""

    warmup_steps: int = 3
    pairs: int = 4
    max_pairs: int = 8
    min_steps: int = 2
    min_s: float = 2.0

    def __post_init__(self) -> None:
        if self.pairs < MIN_PAIRS:
            raise UsageError(f"at least {MIN_PAIRS} windows per configuration are needed, got {self.pairs}")
        if self.max_pairs < self.pairs:
            raise UsageError(f"max_pairs ({self.max_pairs}) must be >= pairs ({self.pairs})")
        if self.warmup_steps < 1 or self.min_steps < 1:
            raise UsageError("warm-up and window steps must be at least 1")
        if self.min_s < 0:
            raise UsageError(f"window duration must be >= 0 s, got {self.min_s}")


def median_interval(values: list[float], alpha: float = ALPHA) -> tuple[float, float]:
    """(lo, hi): the k-th smallest and k-th largest value, k the largest with P(Bin(n, 1/2) < k) <= alpha.

    Whatever the distribution, the true median lies below ``lo`` with probability at most
    ``alpha`` (and above ``hi`` likewise). With too few values for ``alpha``, k = 1 (min, max).
    """
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return (0.0, 0.0)
    k, tail = 1, 0.0
    while k < (n + 1) // 2:
        tail += math.comb(n, k - 1) / 2**n
        nxt = tail + math.comb(n, k) / 2**n
        if nxt > alpha:
            break
        k += 1
    return (ordered[k - 1], ordered[n - k])


@dataclass(frozen=True)
class Comparison:
    """B against A over interleaved windows."""

    a: tuple[Window, ...]
    b: tuple[Window, ...]

    @property
    def ratios(self) -> list[float]:
        """B/A per adjacent pair of windows."""
        return [wb.samples_per_s / wa.samples_per_s if wa.samples_per_s else 0.0 for wa, wb in zip(self.a, self.b)]

    @property
    def ratio(self) -> float:
        """Median of the pair ratios: B's speed relative to A."""
        return median(self.ratios)

    @property
    def interval(self) -> tuple[float, float]:
        """Distribution-free interval of the median ratio (see :func:`median_interval`)."""
        return median_interval(self.ratios)

    @property
    def noise(self) -> float:
        """Half the interval's width relative to the median: the ± of :attr:`ratio`."""
        lo, hi = self.interval
        return (hi - lo) / 2 / self.ratio if self.ratio else 0.0

    @property
    def a_rate(self) -> float:
        """Median samples/s of A's windows."""
        return median([w.samples_per_s for w in self.a])

    @property
    def b_rate(self) -> float:
        """Median samples/s of B's windows."""
        return median([w.samples_per_s for w in self.b])

    @property
    def b_spread(self) -> float:
        """(max - min) / median of B's window rates."""
        return relative_spread([w.samples_per_s for w in self.b])

    @property
    def b_wait_share(self) -> float:
        """Median data-wait share of B's windows."""
        return median([w.wait_share for w in self.b])

    @property
    def b_peak_mem_bytes(self) -> int | None:
        """Largest peak memory over B's windows (None when not measurable)."""
        peaks = [w.peak_mem_bytes for w in self.b if w.peak_mem_bytes]
        return max(peaks) if peaks else None

    def decided(self, min_gain: float = MIN_GAIN) -> str:
        """ "faster", "slower" or "open", from the interval against ``1 ± min_gain``."""
        lo, hi = self.interval
        if lo > 1.0 + min_gain:
            return "faster"
        if hi < 1.0 - min_gain:
            return "slower"
        return "open"


def warm(session: Session, plan: TimingPlan) -> None:
    """Warm-up steps: all of them for a new session, one for a session that sat idle."""
    session.run_steps(plan.warmup_steps if session.steps_done == 0 else 1)


def _pair(a: Session, b: Session, plan: TimingPlan, index: int, a_out: list[Window], b_out: list[Window]) -> None:
    if index % 2 == 0:
        a_out.append(a.window(plan.min_steps, plan.min_s))
        b_out.append(b.window(plan.min_steps, plan.min_s))
    else:
        b_out.append(b.window(plan.min_steps, plan.min_s))
        a_out.append(a.window(plan.min_steps, plan.min_s))


def compare(a: Session, b: Session, plan: TimingPlan, min_gain: float | None = None) -> Comparison:
    """Time ``a`` and ``b`` in ABBA-interleaved windows after warm-up.

    With ``min_gain`` given, pairs are added (up to ``plan.max_pairs``) while the verdict is open
    and the median ratio suggests a gain larger than ``min_gain``.
    """
    warm(a, plan)
    warm(b, plan)
    a_windows: list[Window] = []
    b_windows: list[Window] = []
    for index in range(plan.pairs):
        _pair(a, b, plan, index, a_windows, b_windows)
    result = Comparison(tuple(a_windows), tuple(b_windows))
    if min_gain is None:
        return result
    index = plan.pairs
    while index < plan.max_pairs and result.decided(min_gain) == "open" and result.ratio > 1.0 + min_gain:
        _pair(a, b, plan, index, a_windows, b_windows)
        index += 1
        result = Comparison(tuple(a_windows), tuple(b_windows))
    return result


def verdict(comparison: Comparison, min_gain: float = MIN_GAIN) -> tuple[bool, str]:
    """(keep?, why) for a candidate B over the current configuration A."""
    lo, hi = comparison.interval
    text = f"{comparison.ratio:.2f}x ({lo:.2f}-{hi:.2f}, {len(comparison.ratios)} pairs)"
    state = comparison.decided(min_gain)
    if state == "faster":
        return True, text
    if state == "slower":
        return False, f"slower: {text}"
    return False, f"no clear gain: {text}"
