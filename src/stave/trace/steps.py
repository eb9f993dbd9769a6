"""Step windows: where each ``ProfilerStep#N`` starts and ends on the trace's timeline.

``torch.profiler`` marks each ``prof.step()`` interval with a ``ProfilerStep#N`` annotation on the
thread that drives training. The GPU work a step launches can finish after the annotation closes
(launches are asynchronous), so a step's window is:

    start = the annotation's start + how long the step's own GPU work waited in the queue between
            its launch call and its start (the first activity it launched on the stream that
            carries most of its compute kernels), never before the previous step's start
    end   = max(annotation end, end of the last GPU activity launched from inside the annotation),
            but never past the next step's start, nor past the last event of the trace.

The queue delay is microseconds when the GPU keeps up; when it does not, the host runs ahead and
the step is the GPU's (the delay shifts each window onto the GPU's timeline).

A step owns the GPU work its own launches started (:func:`gpu_owner`): the per-step numbers count
an activity only in the window of the step whose annotation holds its launch call, clipped to that
window. Work launched before the first profiled step (an unprofiled iteration still draining), after
the last one (end-of-loop calls) or between two annotations belongs to no step and is reported apart
(the ``hta`` section's ``facts.outside_steps``); an activity whose launch call is not in the trace
is placed by its own start, as nothing better is known.

The last clip handles real traces whose last annotation runs on long after the profiler stopped
(the end of the trace is the end of the profiler's own "Trace" span when the file has one).
Without step markers the whole trace (first event to last) is one step, and the analysis says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stave.trace.kernels import COMMUNICATION, classify_kernel
from stave.trace.launches import LaunchInfo
from stave.trace.tables import KERNEL, RUNTIME, TraceData


# A launch reaches an idle GPU in about 5-20 us (launch call to kernel start in CUPTI timestamps);
# a delay under this is launch latency, not a queue of earlier steps' work, and moves no window.
QUEUE_DELAY_MIN_NS = 50_000


@dataclass
class StepWindows:
    """Step numbers and their [start, end) windows in ns; ``marked`` is False for the whole-trace step."""

    numbers: np.ndarray
    start: np.ndarray
    end: np.ndarray
    cpu_end: np.ndarray
    thread: int
    marked: bool
    # The ProfilerStep annotations' own starts (``start`` may be later: the queue delay).
    cpu_start: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.numbers)

    @property
    def duration(self) -> np.ndarray:
        """Window lengths (ns)."""
        return self.end - self.start

    def cpu_step_of(self, t: np.ndarray) -> np.ndarray:
        """Index of the ProfilerStep annotation containing each time, or -1 (the window without markers)."""
        lo = self.cpu_start if self.cpu_start is not None else self.start
        i = np.searchsorted(lo, t, side="right") - 1
        ok = (i >= 0) & (t < self.cpu_end[np.maximum(i, 0)])
        return np.where(ok, i, -1)

    def step_of(self, t: np.ndarray) -> np.ndarray:
        """Index of the window containing each time, or -1."""
        i = np.searchsorted(self.start, t, side="right") - 1
        ok = (i >= 0) & (t < self.end[np.maximum(i, 0)])
        return np.where(ok, i, -1)


def trace_extent(data: TraceData, exclude: np.ndarray | None = None) -> tuple[int, int]:
    """First start and last end over all host and GPU events (host rows in ``exclude`` left out)."""
    keep = np.ones(len(data.host), dtype=bool)
    if exclude is not None:
        keep[exclude] = False
    if not keep.any() and len(data.gpu) == 0:
        keep[:] = True  # nothing but step markers: their own extent is all there is
    starts = [a.min() for a in (data.host.start[keep], data.gpu.start) if len(a)]
    ends = [a.max() for a in (data.host.end[keep], data.gpu.end) if len(a)]
    return int(min(starts)), int(max(ends))


def find_steps(data: TraceData) -> StepWindows:
    """Step windows of one trace (see the module docstring for the exact rule)."""
    host = data.host
    step_ids = data.step_name_ids()
    mask = np.isin(host.name, np.fromiter(step_ids, dtype=np.int32)) if step_ids else np.zeros(len(host), bool)
    idx = np.flatnonzero(mask)
    # Some real traces have a last marker that runs on long after the profiler stopped recording:
    # where the profiler's own window ("Trace" span) is known, markers are clipped to it.
    lo, hi = trace_extent(data, exclude=idx)
    if data.profiler_span is not None:
        hi = max(hi, data.profiler_span[1])
    elif len(idx):
        hi = max(hi, int(host.end[idx].max()))
    if len(idx) == 0:
        return StepWindows(
            numbers=np.array([0]),
            start=np.array([lo], dtype=np.int64),
            end=np.array([hi], dtype=np.int64),
            cpu_end=np.array([hi], dtype=np.int64),
            thread=_busiest_thread(data),
            marked=False,
        )
    # The training thread is the one that carries the step markers (the most of them, if several).
    threads, counts = np.unique(host.thread[idx], return_counts=True)
    thread = int(threads[np.argmax(counts)])
    idx = idx[host.thread[idx] == thread]
    idx = idx[np.argsort(host.start[idx], kind="stable")]
    numbers = np.array([step_ids[int(n)] for n in host.name[idx]])
    cpu_start = host.start[idx].astype(np.int64)
    cpu_end = np.minimum(host.end[idx], hi).astype(np.int64)
    queue_delay, gpu_end = _gpu_of_launches(data, cpu_start, cpu_end)
    # When the GPU is the short stave the host runs steps ahead of it (nothing in the loop waits),
    # and the annotations measure launch speed, not the step: an H100 fp32 MLP showed 3 ms
    # annotations for 39 ms of kernels per step. A step therefore starts as late as its first GPU
    # work had to queue behind earlier steps' work; with an idle queue that delay is microseconds.
    start = np.maximum.accumulate(cpu_start + queue_delay)
    end = np.maximum(cpu_end, gpu_end)
    next_start = np.append(start[1:], hi)
    # Windows never overlap, so per-step parts can be summed over steps.
    end = np.minimum(end, next_start)
    keep = end > start
    return StepWindows(numbers[keep], start[keep], end[keep], cpu_end[keep], thread, True, cpu_start[keep])


@dataclass
class OwnedGpu:
    """Which step owns each GPU row (index into the windows, -1 for none) and the rows' spans
    clipped to their owner's window (empty for rows no step owns)."""

    owner: np.ndarray
    start: np.ndarray
    end: np.ndarray

    @property
    def in_steps(self) -> np.ndarray:
        """GPU rows some step owns."""
        return self.owner >= 0


def own_gpu(data: TraceData, windows: StepWindows, launches: LaunchInfo) -> OwnedGpu:
    """Give each GPU row to the step that launched it (module docstring).

    Without step markers the whole trace is one step, which owns everything inside it. Windows do
    not overlap, so a union of the clipped spans measured in a window is exactly the time of that
    step's own work there, whatever else ran beside it.
    """
    gpu = data.gpu
    if len(windows) == 0:
        z = np.zeros(len(gpu), dtype=np.int64)
        return OwnedGpu(z - 1, z, z.copy())
    owner = windows.step_of(gpu.start)
    if windows.marked:
        # A launch call's duration is -1 where the trace has none (its start is then meaningless).
        owner = np.where(launches.duration >= 0, windows.cpu_step_of(launches.start), owner)
    mine = owner >= 0
    o = np.maximum(owner, 0)
    start = np.where(mine, np.maximum(gpu.start, windows.start[o]), 0)
    end = np.where(mine, np.minimum(gpu.end, windows.end[o]), 0)
    return OwnedGpu(owner, start, np.maximum(end, start))


def _gpu_of_launches(data: TraceData, start: np.ndarray, cpu_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per step, for the GPU activity whose launch call lies inside the step annotation: how long the
    first of it waited between its launch and its start (0 without GPU work), and the last end."""
    out = np.zeros(len(start), dtype=np.int64)
    delay = np.zeros(len(start), dtype=np.int64)
    host, gpu = data.host, data.gpu
    if len(gpu) == 0:
        return delay, out
    rt = host.cat == RUNTIME
    launch_corr = host.corr[rt]
    launch_t = host.start[rt]
    order = np.argsort(launch_corr, kind="stable")
    launch_corr = launch_corr[order]
    launch_t = launch_t[order]
    pos = np.searchsorted(launch_corr, gpu.corr)
    pos_c = np.minimum(pos, max(len(launch_corr) - 1, 0))
    found = (len(launch_corr) > 0) & (gpu.corr >= 0)
    if len(launch_corr):
        found &= launch_corr[pos_c] == gpu.corr
    t = np.where(found, launch_t[pos_c] if len(launch_corr) else 0, -1)
    i = np.searchsorted(start, t, side="right") - 1
    inside = found & (i >= 0) & (t < cpu_end[np.maximum(i, 0)])
    np.maximum.at(out, i[inside], gpu.end[inside])
    # Per step, on the stream that carries most of the step's own kernels (its compute stream),
    # the first of them and how long it queued (start minus launch). Not the step's earliest
    # activity on any stream: an idle copy stream starts its copy at once while the compute
    # stream's kernels still queue behind the previous step's; nor the longest queue of any
    # stream: a communication stream's first kernel may wait on an event, not on a backlog.
    rows = np.flatnonzero(inside)
    if len(rows):
        stream = gpu.stream[rows]
        order = np.lexsort((gpu.start[rows], stream, i[rows]))
        rows, stream = rows[order], stream[order]
        step_of_row = i[rows]
        first = np.ones(len(rows), dtype=bool)
        first[1:] = (step_of_row[1:] != step_of_row[:-1]) | (stream[1:] != stream[:-1])
        group = np.cumsum(first) - 1
        # Compute kernels first (a copy stream is never the compute stream, nor is a communication
        # stream, whose first kernel may wait on an event), then communication kernels, then all.
        is_kernel = gpu.kind[rows] == KERNEL
        comm_ids = data.name_ids_where(lambda n: classify_kernel(n).group == COMMUNICATION)
        is_comm = is_kernel & np.isin(gpu.name[rows], comm_ids)
        n_groups = int(group[-1]) + 1
        n_compute = np.bincount(group, weights=is_kernel & ~is_comm, minlength=n_groups)
        n_comm = np.bincount(group, weights=is_comm, minlength=n_groups)
        n_all = np.bincount(group, minlength=n_groups)
        heads = rows[first]
        lag = np.maximum(gpu.start[heads] - t[heads], 0)
        g_step = step_of_row[first]
        # The busiest stream per step: sort groups by (step, counts) and keep each step's last.
        pick = np.lexsort((n_all, n_comm, n_compute, g_step))
        last = np.ones(len(pick), dtype=bool)
        last[:-1] = g_step[pick][1:] != g_step[pick][:-1]
        chosen = pick[last]
        delay[g_step[chosen]] = lag[chosen]
    delay[delay < QUEUE_DELAY_MIN_NS] = 0
    return delay, out


def _busiest_thread(data: TraceData) -> int:
    host = data.host
    if len(host) == 0:
        return -1
    busy = np.bincount(host.thread, weights=(host.end - host.start).astype(np.float64))
    return int(np.argmax(busy))
