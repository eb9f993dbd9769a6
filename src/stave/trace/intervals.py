"""Interval arithmetic on numpy arrays of [start, end) nanosecond spans.

Every time measure in the trace analysis (busy time, additive breakdown, overlap) is a length of a
union or difference of interval sets, evaluated inside step windows. Unions are computed once per
set (sort + running maximum), and lengths inside many windows at once through a cumulative-length
function, so the cost is O(n log n) however many steps there are.
"""

from __future__ import annotations

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]


def empty() -> Intervals:
    """An empty interval set."""
    z = np.zeros(0, dtype=np.int64)
    return z, z.copy()


def merge(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """The union of intervals as sorted, disjoint [start, end) intervals (empty ones dropped)."""
    keep = ends > starts
    s = np.asarray(starts, dtype=np.int64)[keep]
    e = np.asarray(ends, dtype=np.int64)[keep]
    if len(s) == 0:
        return empty()
    order = np.argsort(s, kind="stable")
    s = s[order]
    e = np.maximum.accumulate(e[order])
    # A new group starts where an interval begins after everything before it has ended.
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > e[:-1]
    idx = np.flatnonzero(new)
    group_end = np.append(idx[1:] - 1, len(s) - 1)
    return s[idx], e[group_end]


def union(*sets: Intervals) -> Intervals:
    """Union of several interval sets."""
    if not sets:
        return empty()
    return merge(np.concatenate([s for s, _ in sets]), np.concatenate([e for _, e in sets]))


def total(ivs: Intervals) -> int:
    """Total length of disjoint intervals."""
    s, e = ivs
    return int((e - s).sum())


def covered_before(ivs: Intervals, t: np.ndarray) -> np.ndarray:
    """For merged intervals, the covered length before each time in ``t`` (vectorized)."""
    s, e = ivs
    t = np.asarray(t, dtype=np.int64)
    if len(s) == 0:
        return np.zeros(len(t), dtype=np.int64)
    cum = np.concatenate(([0], np.cumsum(e - s)))
    i = np.searchsorted(s, t, side="right") - 1
    inside = np.where(i >= 0, np.minimum(t - s[np.maximum(i, 0)], e[np.maximum(i, 0)] - s[np.maximum(i, 0)]), 0)
    return np.where(i >= 0, cum[np.maximum(i, 0)] + inside, 0)


def measure_in(ivs: Intervals, win_start: np.ndarray, win_end: np.ndarray) -> np.ndarray:
    """Covered length of merged intervals inside each window [win_start, win_end)."""
    return covered_before(ivs, win_end) - covered_before(ivs, win_start)


def clip(ivs: Intervals, lo: int, hi: int) -> Intervals:
    """Merged intervals restricted to [lo, hi)."""
    s, e = ivs
    s2 = np.maximum(s, lo)
    e2 = np.minimum(e, hi)
    keep = e2 > s2
    return s2[keep], e2[keep]


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Intersection of two merged interval sets."""
    sa, ea = a
    sb, eb = b
    if len(sa) == 0 or len(sb) == 0:
        return empty()
    # Each b interval overlaps a contiguous run of a intervals: find it by binary search.
    lo = np.searchsorted(ea, sb, side="right")
    hi = np.searchsorted(sa, eb, side="left")
    counts = np.maximum(hi - lo, 0)
    if counts.sum() == 0:
        return empty()
    b_idx = np.repeat(np.arange(len(sb)), counts)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    a_idx = np.repeat(lo, counts) + offsets
    s = np.maximum(sa[a_idx], sb[b_idx])
    e = np.minimum(ea[a_idx], eb[b_idx])
    keep = e > s
    return s[keep], e[keep]


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """Parts of merged set ``a`` not covered by merged set ``b``."""
    sa, ea = a
    if len(sa) == 0 or len(b[0]) == 0:
        return a
    # a minus b = a intersected with the complement of b (bounded by a's extent).
    lo = int(sa[0])
    hi = int(ea[-1])
    sb, eb = clip(b, lo, hi)
    comp_s = np.concatenate(([lo], eb))
    comp_e = np.concatenate((sb, [hi]))
    keep = comp_e > comp_s
    return intersect(a, (comp_s[keep], comp_e[keep]))


def gaps(ivs: Intervals, lo: int, hi: int) -> Intervals:
    """The uncovered parts of [lo, hi)."""
    s, e = clip(ivs, lo, hi)
    gs = np.concatenate(([lo], e))
    ge = np.concatenate((s, [hi]))
    keep = ge > gs
    return gs[keep], ge[keep]
