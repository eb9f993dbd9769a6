"""Synchronizing runtime calls, attributed to the op and the source line that issued them.

A synchronizing call blocks the host until the GPU has drained (``cudaStreamSynchronize``,
``cudaDeviceSynchronize``, ``cudaEventSynchronize``, a synchronous ``cudaMemcpy``; the HIP names
on ROCm). Inside a training step each one costs twice: the host waits, and afterwards the GPU idles
until the host has launched new work. ``.item()``, ``.cpu()``, ``print(loss)`` and
``torch.cuda.synchronize()`` are the usual sources. A ``cudaMemcpyAsync`` whose copy lands in
pageable host memory blocks the host the same way (the driver stages it synchronously; ``.item()``
and ``.cpu()`` without a pinned buffer are such copies); one into pinned memory does not.

A call counts when it lies inside a ProfilerStep annotation (calls after the last step, such as an
end-of-loop synchronize, are not the loop's). It is charged the host time it blocked and the GPU
idle that followed it: from its start to the first kernel that starts after it returns, inside its
step's window, and only when the GPU had work during the call (a call that found the GPU idle
waited for nothing and caused nothing). Each call is charged to the outermost PyTorch
op around it (``aten::item``: what the user called) and, when the trace has Python frames
(``with_stack=True``), to the innermost frame of the user's own code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stave.trace import intervals as iv
from stave.trace.nesting import Tree, user_frame
from stave.trace.steps import StepWindows
from stave.trace.tables import KERNEL, MEMCPY, RUNTIME, TraceData

SYNC_CALLS: frozenset[str] = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cudaMemcpyFromSymbol",
        "cudaMemcpyToSymbol",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
        "cuMemcpyDtoH_v2",
        "cuMemcpyHtoD_v2",
        "hipStreamSynchronize",
        "hipDeviceSynchronize",
        "hipEventSynchronize",
        "hipMemcpy",
        "hipMemcpyWithStream",
    }
)
MAX_SITES = 20
# Copies that block the host although called as async: into pageable host memory.
ASYNC_COPY_CALLS: frozenset[str] = frozenset({"cudaMemcpyAsync", "cudaMemcpy2DAsync", "hipMemcpyAsync",
                                              "cuMemcpyDtoHAsync_v2"})
PAGEABLE_COPY = "(pageable copy)"


@dataclass
class SyncSite:
    """Sync calls with the same call, op and source line."""

    call: str
    op: str | None
    file: str | None
    line: int | None
    function: str | None
    count: int
    blocked_s: float
    gpu_idle_after_s: float


@dataclass
class SyncSummary:
    """All synchronizing calls inside the steps."""

    calls: int
    calls_per_step: float
    # Steps (windows) with at least one blocking call.
    steps_with_calls: int
    blocked_s: float
    gpu_idle_after_ns_per_step: list[int]
    sites: list[SyncSite]
    # The call that blocked the largest share of its step: name (a pageable async copy is named
    # "cudaMemcpyAsync (pageable copy)"), enclosing op, host time, step number, share of the step.
    largest_call: str | None = None
    largest_op: str | None = None
    largest_blocked_s: float = 0.0
    largest_step: int | None = None
    largest_share: float = 0.0


def analyze_syncs(data: TraceData, windows: StepWindows, ops: Tree, frames: Tree) -> SyncSummary:
    """Find sync calls inside the steps, attribute them, and measure the GPU idle they leave behind.

    The idle they cause is the GPU idle time from the call's start to the first kernel that starts
    after it returns: the GPU drains while the host waits, then waits for the host to launch again.
    """
    host, gpu = data.host, data.gpu
    ids = data.name_ids_where(lambda n: n in SYNC_CALLS)
    mask = (host.cat == RUNTIME) & np.isin(host.name, ids) if len(ids) else np.zeros(len(host), bool)
    pageable = _pageable_copies(data)
    rows = np.flatnonzero(mask | pageable)
    step = windows.cpu_step_of(host.start[rows]) if windows.marked else windows.step_of(host.start[rows])
    rows = rows[step >= 0]
    step = step[step >= 0]
    kernels = gpu.kind == KERNEL
    k_start = np.sort(gpu.start[kernels])
    busy = iv.merge(gpu.start[kernels], gpu.end[kernels])
    work = iv.merge(gpu.start, gpu.end)
    t0 = host.start[rows]
    t1 = host.end[rows]
    # Without a later kernel in the step, only the call itself is charged: what follows it
    # could be anything (data loading, the end of the profiled window).
    nxt = np.searchsorted(k_start, t1, side="left")
    if len(k_start):
        resume = np.where(nxt < len(k_start), k_start[np.minimum(nxt, len(k_start) - 1)], t1)
    else:
        resume = t1.copy()
    resume = np.where(resume > windows.end[step], t1, resume)
    resume = np.minimum(resume, windows.end[step])
    idle = np.maximum(resume - t0, 0) - (iv.covered_before(busy, np.maximum(resume, t0)) - iv.covered_before(busy, t0))
    waited = (iv.covered_before(work, t1) - iv.covered_before(work, t0)) > 0
    idle = np.where(waited, np.maximum(idle, 0), 0)
    idle_per_step = np.bincount(step, weights=idle.astype(np.float64), minlength=len(windows)).astype(np.int64)
    sites: dict[tuple, list] = {}
    for k, r in enumerate(rows.tolist()):
        thread = int(host.thread[r])
        a, b = int(t0[k]), int(t1[k])
        op_chain = ops.enclosing(thread, a, b)
        op = data.names[int(host.name[ops.rows[op_chain[-1]]])] if op_chain else None
        frame = None
        for j in frames.enclosing(thread, a, b):
            frame = user_frame(data.names[int(host.name[frames.rows[j]])])
            if frame is not None:
                break
        call = data.names[int(host.name[r])] + (f" {PAGEABLE_COPY}" if pageable[r] else "")
        key = (call, op, *(frame or (None, None, None)))
        entry = sites.setdefault(key, [0, 0, 0])
        entry[0] += 1
        entry[1] += b - a
        entry[2] += int(idle[k])
    site_list = [
        SyncSite(call, op, file, line, func, n, blocked / 1e9, idle / 1e9)
        for (call, op, file, line, func), (n, blocked, idle) in sites.items()
    ]
    site_list.sort(key=lambda s: (-s.count, -s.blocked_s, s.call))
    largest: dict = {}
    if len(rows):
        step_len = np.maximum(windows.cpu_end[step] - (windows.cpu_start[step] if windows.cpu_start is not None
                                                         else windows.start[step]), 1)
        share = (t1 - t0) / step_len
        k = int(np.argmax(share))
        r = int(rows[k])
        chain = ops.enclosing(int(host.thread[r]), int(t0[k]), int(t1[k]))
        largest = {
            "largest_call": data.names[int(host.name[r])] + (f" {PAGEABLE_COPY}" if pageable[r] else ""),
            "largest_op": data.names[int(host.name[ops.rows[chain[0]]])] if chain else None,
            "largest_blocked_s": int(t1[k] - t0[k]) / 1e9,
            "largest_step": int(windows.numbers[step[k]]),
            "largest_share": float(share[k]),
        }
    return SyncSummary(
        calls=len(rows),
        calls_per_step=len(rows) / len(windows) if len(windows) else 0.0,
        steps_with_calls=len(np.unique(step)),
        blocked_s=float((host.end[rows] - host.start[rows]).sum()) / 1e9,
        gpu_idle_after_ns_per_step=idle_per_step.tolist(),
        sites=site_list[:MAX_SITES],
        **largest,
    )


def _pageable_copies(data: TraceData) -> np.ndarray:
    """Host rows: async copy calls whose GPU copy (joined by correlation id) lands in pageable memory."""
    host, gpu = data.host, data.gpu
    ids = data.name_ids_where(lambda n: n in ASYNC_COPY_CALLS)
    out = np.zeros(len(host), dtype=bool)
    if not len(ids):
        return out
    into_pageable = data.name_ids_where(lambda n: n.startswith("Memcpy") and "-> Pageable" in n)
    copies = (gpu.kind == MEMCPY) & np.isin(gpu.name, into_pageable) if len(into_pageable) else None
    if copies is None or not copies.any():
        return out
    corr = np.unique(gpu.corr[copies & (gpu.corr >= 0)])
    calls = (host.cat == RUNTIME) & np.isin(host.name, ids)
    out[calls] = np.isin(host.corr[calls], corr)
    return out
