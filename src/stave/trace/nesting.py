"""Nesting of host events on a thread: parents, self time, top ops, and who called a runtime call.

Host events of one thread nest like a call stack (an op contains the ops it dispatches). With the
events sorted by start (longer first on ties), the parent of an event is the nearest earlier event
still open when it starts; one pass with a stack finds all parents. Self time is an event's
duration minus its direct children's, which is what ``key_averages()`` reports as "Self CPU".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from stave.trace.tables import CPU_OP, PYTHON, TraceData

TOP_OPS = 10
_FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<func>.+)$")
# Python frames in these locations are libraries, not the user's code to change.
_LIBRARY_MARKERS = ("site-packages/", "dist-packages/", "/lib/python", "torch/", "<built-in", "<frozen")


@dataclass
class Tree:
    """One category of host events (e.g. ops) sorted by thread then start, with parent indices."""

    rows: np.ndarray
    start: np.ndarray
    end: np.ndarray
    thread: np.ndarray
    parent: np.ndarray
    _bounds: dict[int, tuple[int, int]] | None = field(default=None, repr=False)

    def enclosing(self, thread: int, t0: int, t1: int) -> list[int]:
        """Indices (into this tree) of the events on ``thread`` that contain [t0, t1], innermost first."""
        if self._bounds is None:
            cuts = np.flatnonzero(np.diff(self.thread)) + 1
            los = np.append(0, cuts).tolist()
            his = np.append(cuts, len(self.thread)).tolist()
            self._bounds = {int(self.thread[lo]): (lo, hi) for lo, hi in zip(los, his) if hi > lo}
        lo, hi = self._bounds.get(thread, (0, 0))
        if lo == hi:
            return []
        j = lo + int(np.searchsorted(self.start[lo:hi], np.int64(t0), side="right")) - 1
        out = []
        while j >= lo:
            if self.end[j] >= t1:
                out.append(j)
            j = int(self.parent[j])
        return out


def build_tree(data: TraceData, mask: np.ndarray) -> Tree:
    """Sort the selected host rows by (thread, start, -duration) and find each one's parent."""
    host = data.host
    rows = np.flatnonzero(mask)
    order = np.lexsort((-(host.end[rows] - host.start[rows]), host.start[rows], host.thread[rows]))
    rows = rows[order]
    start = host.start[rows]
    end = host.end[rows]
    thread = host.thread[rows]
    parent = np.full(len(rows), -1, dtype=np.int64)
    bounds = np.flatnonzero(np.diff(thread)) + 1
    for lo, hi in zip(np.append(0, bounds).tolist(), np.append(bounds, len(rows)).tolist()):
        parent[lo:hi] = _offset(_parents(start[lo:hi], end[lo:hi]), lo)
    return Tree(rows, start, end, thread, parent)


def _offset(parents: np.ndarray, lo: int) -> np.ndarray:
    """Parent indices of one thread's slice, shifted to indices of the whole tree."""
    return np.where(parents >= 0, parents + lo, -1)


def _parents(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Parents of events on one thread, sorted by (start, -duration), without a Python loop.

    An event's depth is the number of earlier events still open at its start (``end > start``):
    ``i`` minus the earlier events already closed. Those closed ones are all events ending at or
    before the start, less the zero-length events that share the start but sort after ``i``. The
    parent is then the last earlier event one level up, which for properly nested spans is the
    innermost one containing it (what a call-stack sweep finds).
    """
    n = len(start)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    idx = np.arange(n)
    closed = np.searchsorted(np.sort(end), start, side="right")
    # Groups of equal start: the zero-length events of a group sort last within it.
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = start[1:] != start[:-1]
    group_id = np.cumsum(new_group) - 1
    group_end = np.append(np.flatnonzero(new_group)[1:], n)[group_id]
    zeros = np.bincount(group_id, weights=(end == start).astype(np.float64)).astype(np.int64)[group_id]
    zero_at_or_after = np.minimum(zeros, group_end - idx)
    depth = idx - (closed - zero_at_or_after)
    parent = np.full(n, -1, dtype=np.int64)
    order = np.argsort(depth, kind="stable")
    sorted_depth = depth[order]
    levels = np.flatnonzero(np.diff(sorted_depth)) + 1
    groups = np.split(order, levels)
    by_depth = {int(depth[g[0]]): g for g in groups}
    for d, members in by_depth.items():
        above = by_depth.get(d - 1)
        if d <= 0 or above is None:
            continue
        k = np.searchsorted(above, members) - 1
        parent[members] = np.where(k >= 0, above[np.maximum(k, 0)], -1)
    return parent


@dataclass
class OpStat:
    """One op name's totals: calls, self time and total (inclusive) time, in seconds."""

    name: str
    calls: int
    self_s: float
    total_s: float


def top_ops(data: TraceData, tree: Tree, windows_start: np.ndarray, windows_end: np.ndarray) -> list[OpStat]:
    """Top ops by self time among ops that start inside the steps (like key_averages(), sorted by self)."""
    dur = (tree.end - tree.start).astype(np.float64)
    child = np.zeros(len(dur))
    has_parent = tree.parent >= 0
    np.add.at(child, tree.parent[has_parent], dur[has_parent])
    self_t = np.maximum(dur - child, 0)
    i = np.searchsorted(windows_start, tree.start, side="right") - 1
    inside = (i >= 0) & (tree.start < windows_end[np.maximum(i, 0)])
    names = data.host.name[tree.rows][inside]
    if len(names) == 0:
        return []
    n = len(data.names)
    self_tot = np.bincount(names, weights=self_t[inside], minlength=n)
    total = np.bincount(names, weights=dur[inside], minlength=n)
    calls = np.bincount(names, minlength=n)
    out = []
    for k in np.argsort(-self_tot, kind="stable")[:TOP_OPS]:
        if calls[k] == 0:
            break
        out.append(OpStat(data.names[k], int(calls[k]), float(self_tot[k]) / 1e9, float(total[k]) / 1e9))
    return out


def op_tree(data: TraceData) -> Tree:
    """The tree of ``cpu_op`` events."""
    return build_tree(data, data.host.cat == CPU_OP)


def python_tree(data: TraceData) -> Tree:
    """The tree of ``python_function`` events (present when the profiler ran with ``with_stack``)."""
    return build_tree(data, data.host.cat == PYTHON)


def user_frame(name: str) -> tuple[str, int, str] | None:
    """(file, line, function) of a Python frame event in the user's own code, else None."""
    m = _FRAME.match(name)
    if not m:
        return None
    path = m.group("file")
    if any(marker in path for marker in _LIBRARY_MARKERS):
        return None
    return path, int(m.group("line")), m.group("func")
