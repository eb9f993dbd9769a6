"""Launches: the host call that enqueued each GPU activity, and launch-bound stretches.

Kineto links a GPU activity to the runtime call that launched it (``cudaLaunchKernel``,
``cuLaunchKernel``, ``cudaMemcpyAsync``, ``hipExtModuleLaunchKernel``...) through the ``correlation``
id both carry. A kernel that runs for less time than its launch call took is *launch-bound*: the
host cannot enqueue work as fast as the GPU finishes it, so the GPU idles between kernels however
fast it is. A run of such kernels on one stream is a launch-bound stretch; the GPU idle time
inside stretches is what CUDA graphs / ``torch.compile(mode="reduce-overhead")`` or fusing small
kernels win back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stave.trace import intervals as iv
from stave.trace.tables import KERNEL, RUNTIME, TraceData

# Consecutive launch-bound kernels that make a stretch worth reporting: a handful can be a tail
# of a step; dozens in a row is a regime (small ops one after the other, e.g. an optimizer loop
# over parameters or an unfused attention block).
MIN_STRETCH_KERNELS = 16


@dataclass
class LaunchInfo:
    """Per GPU row: start and duration (ns) of the launching runtime call, -1 when unknown."""

    start: np.ndarray
    duration: np.ndarray
    thread: np.ndarray


def launch_info(data: TraceData) -> LaunchInfo:
    """Join every GPU activity to its launch call by correlation id."""
    host, gpu = data.host, data.gpu
    n = len(gpu)
    out = LaunchInfo(np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.full(n, -1, np.int32))
    rt = np.flatnonzero((host.cat == RUNTIME) & (host.corr >= 0))
    if n == 0 or len(rt) == 0:
        return out
    corr = host.corr[rt]
    order = np.argsort(corr, kind="stable")
    rt = rt[order]
    corr = corr[order]
    pos = np.minimum(np.searchsorted(corr, gpu.corr), len(corr) - 1)
    found = (gpu.corr >= 0) & (corr[pos] == gpu.corr)
    rows = rt[pos[found]]
    out.start[found] = host.start[rows]
    out.duration[found] = host.end[rows] - host.start[rows]
    out.thread[found] = host.thread[rows]
    return out


@dataclass
class LaunchBound:
    """Launch-bound stretches of one trace (ns inside; totals over the analysed steps)."""

    kernels_with_launch: int
    launch_bound_kernels: int
    stretches: int
    stretch_kernels: int
    stretch_span_ns: int
    stretch_idle_ns: int
    longest_stretch_kernels: int
    idle_ns_per_step: np.ndarray


def launch_bound(data: TraceData, launches: LaunchInfo, in_scope: np.ndarray, windows_start: np.ndarray,
                 windows_end: np.ndarray) -> LaunchBound:
    """Find stretches of at least :data:`MIN_STRETCH_KERNELS` launch-bound kernels per stream."""
    gpu = data.gpu
    rows = np.flatnonzero(in_scope & (gpu.kind == KERNEL) & (launches.duration >= 0))
    bound = (gpu.end[rows] - gpu.start[rows]) < launches.duration[rows]
    spans_s: list[int] = []
    spans_e: list[int] = []
    counts: list[int] = []
    busy = iv.merge(gpu.start[in_scope], gpu.end[in_scope])
    key = gpu.device[rows].astype(np.int64) * (1 << 40) + gpu.stream[rows]
    order = np.lexsort((gpu.start[rows], key))
    rows, bound, key = rows[order], bound[order], key[order]
    # Runs of True in `bound` that stay on one stream.
    brk = np.ones(len(rows), dtype=bool)
    brk[1:] = (key[1:] != key[:-1]) | (bound[1:] != bound[:-1])
    run_start = np.flatnonzero(brk)
    run_end = np.append(run_start[1:], len(rows))
    for a, b in zip(run_start.tolist(), run_end.tolist()):
        if bound[a] and b - a >= MIN_STRETCH_KERNELS:
            spans_s.append(int(gpu.start[rows[a]]))
            spans_e.append(int(gpu.end[rows[b - 1 : b]].max()))
            counts.append(b - a)
    stretch = iv.merge(np.array(spans_s, dtype=np.int64), np.array(spans_e, dtype=np.int64))
    idle = iv.subtract(stretch, busy)
    return LaunchBound(
        kernels_with_launch=len(rows),
        launch_bound_kernels=int(bound.sum()),
        stretches=len(counts),
        stretch_kernels=int(sum(counts)),
        stretch_span_ns=iv.total(stretch),
        stretch_idle_ns=iv.total(idle),
        longest_stretch_kernels=max(counts, default=0),
        idle_ns_per_step=iv.measure_in(idle, windows_start, windows_end),
    )
