"""Small robust statistics used across analyses (no numpy needed for a few hundred values)."""

from __future__ import annotations

import math
import statistics
from typing import Sequence


def median(values: Sequence[float]) -> float:
    """Median; 0.0 for an empty sequence."""
    return float(statistics.median(values)) if values else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation; 0.0 for an empty sequence."""
    if not values:
        return 0.0
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    frac = pos - lo
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * frac)


def mad(values: Sequence[float]) -> float:
    """Median absolute deviation (unscaled)."""
    if not values:
        return 0.0
    m = median(values)
    return median([abs(v - m) for v in values])


def relative_spread(values: Sequence[float]) -> float:
    """(max - min) / median: the spread we report beside a median of benchmark windows."""
    if not values:
        return 0.0
    m = median(values)
    return (max(values) - min(values)) / m if m else 0.0


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
    """Least-squares line ``y = a + b x``; returns (a, b, r_squared). Needs at least 2 points."""
    n = len(xs)
    if n < 2 or n != len(ys):
        return (ys[0] if ys else 0.0, 0.0, 0.0)
    mx = sum(xs) / n
    my = sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return (my, 0.0, 0.0)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    b = sxy / sxx
    a = my - b * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (a + b * x)) ** 2 for x, y in zip(xs, ys))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0
    return (a, b, r2)


def safe_ratio(num: float, den: float, default: float = 0.0) -> float:
    """num / den, or ``default`` when den is 0."""
    return num / den if den else default


def binomial_tail(n: int, k: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p): how often chance alone gives ``k`` or more of ``n``."""
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(max(k, 0), n + 1))


def hypergeometric_tail(population: int, marked: int, draws: int, k: int) -> float:
    """P(X >= k) when ``draws`` of ``population`` items are picked at random and ``marked`` of
    the population count: how often ``k`` or more picked items fall in a given class by chance."""
    total = math.comb(population, draws)
    if total == 0:
        return 1.0
    top = min(marked, draws)
    return sum(math.comb(marked, i) * math.comb(population - marked, draws - i) for i in range(max(k, 0), top + 1)) / total


# A paired gain holds only where the faster side won so many rounds that a fair coin would win as
# many less than 5 % of the time (a one-sided sign test); otherwise it is reported as no gain.
SIGN_TEST_P = 0.05


def paired_ratio(own_s: Sequence[float], other_s: Sequence[float]) -> float:
    """The median of the rounds' own/other time ratios (rounds timed back to back), at most 1 unless
    the other side won significantly many rounds (:data:`SIGN_TEST_P`). A best-of-rounds per side
    lets one lucky round of a busy machine pass for a gain; paired rounds and the test do not."""
    ratios = [a / b for a, b in zip(own_s, other_s) if b > 0]
    if not ratios:
        return 1.0
    ratio = statistics.median(ratios)
    wins = sum(r > 1.0 for r in ratios)
    if ratio > 1.0 and binomial_tail(len(ratios), wins, 0.5) >= SIGN_TEST_P:
        return 1.0
    return ratio
