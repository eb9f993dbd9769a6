"""GPU analysis of one trace: utilization, idle split per stream, kernel classes, memcpy, overlap.

Definitions (all restricted to GPU activity that starts inside the analysed steps):

* utilization: time with at least one kernel running (any stream) over the steps' total time.
  Memcpy and memset are reported apart, not counted as utilization.
* idle split, per stream (the mechanism of Holistic Trace Analysis): for consecutive activities on a
  stream, the gap before an activity is *host wait* when its launch call started after the
  previous activity ended (the GPU had nothing queued), a *short gap* when it is shorter than
  :data:`SHORT_GAP_NS` (back-to-back launch latency), and *other* otherwise (waiting for an event,
  another stream, a collective).
* kernel groups: compute / communication (NCCL...) / memory (memcpy, memset), with top kernels.
* matmul time by tensor-core use and precision (see :mod:`stave.trace.kernels`).
* memcpy by direction and host memory kind (pinned / pageable), with bytes and bandwidth.
* communication/computation overlap: the share of communication-kernel time during which a
  compute kernel also ran.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from stave.trace import intervals as iv
from stave.trace.kernels import (
    COMMUNICATION,
    COMPUTE,
    MEMORY,
    classify_kernel,
    classify_with_operands,
    collective_of,
    short_name,
)
from stave.trace.launches import LaunchInfo
from stave.trace.steps import OwnedGpu, StepWindows
from stave.trace.tables import KERNEL, MEMCPY, TraceData

# Gaps shorter than this between activities on one stream are launch latency, not a stall: a
# kernel launch takes a few microseconds end to end on current GPUs, and 30 us is the threshold
# Holistic Trace Analysis uses, so both tools attribute idle time the same way.
SHORT_GAP_NS = 30_000
TOP_KERNELS = 10

_MEMCPY = re.compile(r"Memcpy (\w+)(?: \((\w+) -> (\w+)\))?")


@dataclass
class KernelStat:
    """One kernel name's total over the analysed steps."""

    name: str
    short_name: str
    count: int
    total_s: float
    mean_us: float
    share: float
    group: str
    matmul: bool
    tensor_core: bool
    precision: str


@dataclass
class StreamIdle:
    """Busy and idle time of one stream, idle split by cause."""

    device: int
    stream: int
    activities: int
    busy_s: float
    host_wait_s: float
    short_gap_s: float
    other_s: float


@dataclass
class MemcpyStat:
    """Copies of one direction and host-memory kind; ``bandwidth_bytes_per_s`` is bytes over busy time."""

    direction: str
    host_memory: str
    count: int
    bytes: int
    busy_s: float
    bandwidth_bytes_per_s: float | None


@dataclass
class GpuSummary:
    """The GPU side of one trace."""

    devices: list[int]
    span_s: float
    kernel_busy_s: float
    utilization: float
    memcpy_busy_s: float
    memset_busy_s: float
    compute_busy_s: float
    communication_busy_s: float
    communication_overlap: float | None
    time_by_group_s: dict[str, float]
    matmul_s: dict[str, float]
    low_precision_in_use: bool
    idle_host_wait_s: float
    idle_short_gap_s: float
    idle_other_s: float
    top_kernels: list[KernelStat] = field(default_factory=list)
    streams: list[StreamIdle] = field(default_factory=list)
    memcpy: list[MemcpyStat] = field(default_factory=list)
    compute_ns_per_step: list[int] = field(default_factory=list)
    pageable_h2d_exposed_ns_per_step: list[int] = field(default_factory=list)
    pageable_h2d_per_step: float = 0.0
    matmul_ns_per_step: dict[str, list[int]] = field(default_factory=dict)
    # Communication kernel time (sum of durations, in steps) per collective kind (kernels.collective_of).
    comm_s_by_collective: dict[str, float] = field(default_factory=dict)


def memcpy_kind(name: str) -> tuple[str, str]:
    """(direction, host memory) of a memcpy activity name; e.g. ("HtoD", "pageable")."""
    m = _MEMCPY.match(name)
    if not m:
        return "other", "unknown"
    direction, src, dst = m.group(1), (m.group(2) or ""), (m.group(3) or "")
    host_side = src if direction == "HtoD" else dst if direction == "DtoH" else "Device"
    memory = {"Pageable": "pageable", "Pinned": "pinned", "Device": "device", "Managed": "managed"}.get(
        host_side, "unknown"
    )
    return direction, memory


def analyze_gpu(data: TraceData, windows: StepWindows, launches: LaunchInfo, owned: OwnedGpu) -> GpuSummary:
    """The GPU summary of one trace (definitions in the module docstring): the work the steps own."""
    gpu = data.gpu
    scope = owned.in_steps
    span_ns = int(windows.duration.sum())
    classes = [classify_kernel(n) for n in data.names]
    for i, operands in data.operands_by_name.items():
        # With record_shapes the launching op's dtypes are known: they beat the name's hints.
        classes[i] = classify_with_operands(data.names[i], operands)
    is_kernel = scope & (gpu.kind == KERNEL)
    comm_name = np.array([c.group == COMMUNICATION for c in classes] + [False], dtype=bool)
    comm = is_kernel & comm_name[gpu.name]
    compute = is_kernel & ~comm

    def busy(mask: np.ndarray) -> iv.Intervals:
        # Clipped to the owner's window: time measured in a window is that step's own work.
        return iv.merge(owned.start[mask], owned.end[mask])

    kernels = busy(is_kernel)
    compute_iv = busy(compute)
    comm_iv = busy(comm)
    ws, we = windows.start, windows.end
    kernel_busy = int(iv.measure_in(kernels, ws, we).sum())
    comm_total = iv.total(comm_iv)
    overlap = iv.total(iv.intersect(comm_iv, compute_iv)) / comm_total if comm_total else None
    dur = gpu.end - gpu.start
    time_by_group = {
        COMPUTE: float(dur[compute].sum()) / 1e9,
        COMMUNICATION: float(dur[comm].sum()) / 1e9,
        MEMORY: float(dur[scope & (gpu.kind != KERNEL)].sum()) / 1e9,
    }
    matmul_s, matmul_steps, low_in_use = _matmul_time(data, classes, compute, windows, owned)
    pageable_ids = np.array(
        [i for i, n in enumerate(data.names) if n.startswith("Memcpy") and memcpy_kind(n) == ("HtoD", "pageable")],
        dtype=np.int32,
    )
    pageable = scope & (gpu.kind == MEMCPY) & np.isin(gpu.name, pageable_ids)
    streams = _stream_idle(data, scope, launches)
    return GpuSummary(
        devices=sorted({int(d) for d in np.unique(gpu.device[scope])}),
        span_s=span_ns / 1e9,
        kernel_busy_s=kernel_busy / 1e9,
        utilization=kernel_busy / span_ns if span_ns else 0.0,
        memcpy_busy_s=int(iv.measure_in(busy(scope & (gpu.kind == MEMCPY)), ws, we).sum()) / 1e9,
        memset_busy_s=int(iv.measure_in(busy(scope & (gpu.kind == 2)), ws, we).sum()) / 1e9,
        compute_busy_s=int(iv.measure_in(compute_iv, ws, we).sum()) / 1e9,
        communication_busy_s=int(iv.measure_in(comm_iv, ws, we).sum()) / 1e9,
        communication_overlap=overlap,
        time_by_group_s=time_by_group,
        matmul_s=matmul_s,
        low_precision_in_use=low_in_use,
        idle_host_wait_s=sum(s.host_wait_s for s in streams),
        idle_short_gap_s=sum(s.short_gap_s for s in streams),
        idle_other_s=sum(s.other_s for s in streams),
        top_kernels=_top_kernels(data, classes, is_kernel),
        streams=streams,
        memcpy=_memcpy_stats(data, scope),
        compute_ns_per_step=iv.measure_in(compute_iv, ws, we).tolist(),
        pageable_h2d_exposed_ns_per_step=iv.measure_in(iv.subtract(busy(pageable), kernels), ws, we).tolist(),
        pageable_h2d_per_step=int(pageable.sum()) / len(windows) if len(windows) else 0.0,
        matmul_ns_per_step=matmul_steps,
        comm_s_by_collective=_by_collective(data, comm),
    )


def _by_collective(data: TraceData, comm: np.ndarray) -> dict[str, float]:
    gpu = data.gpu
    out: dict[str, float] = {}
    for name_id in np.unique(gpu.name[comm]).tolist():
        m = comm & (gpu.name == name_id)
        kind = collective_of(data.names[name_id])
        out[kind] = out.get(kind, 0.0) + int((gpu.end[m] - gpu.start[m]).sum()) / 1e9
    return out


def _matmul_time(
    data: TraceData, classes: list, compute: np.ndarray, windows: StepWindows, owned: OwnedGpu
) -> tuple[dict[str, float], dict[str, list[int]], bool]:
    """Matmul-like kernel time by (tensor cores, precision); whether fp16/bf16/fp8 kernels ran at all."""
    gpu = data.gpu
    used = np.unique(gpu.name[compute]) if compute.any() else np.zeros(0, np.int32)
    low_in_use = any(classes[i].precision == "low" for i in used)
    buckets = {"tensor_core_low": [], "tensor_core_tf32": [], "tensor_core_other": [], "fp32_no_tc": [],
               "low_no_tc": [], "other_no_tc": []}
    for i in used:
        c = classes[i]
        if not c.matmul:
            continue
        if c.tensor_core:
            key = {"low": "tensor_core_low", "tf32": "tensor_core_tf32"}.get(c.precision, "tensor_core_other")
        else:
            key = {"low": "low_no_tc", "fp32": "fp32_no_tc"}.get(c.precision, "other_no_tc")
        buckets[key].append(int(i))
    out_s: dict[str, float] = {}
    per_step: dict[str, list[int]] = {}
    for key, ids in buckets.items():
        mask = compute & np.isin(gpu.name, np.array(ids, dtype=np.int32)) if ids else np.zeros(len(gpu), bool)
        merged = iv.merge(owned.start[mask], owned.end[mask])
        steps = iv.measure_in(merged, windows.start, windows.end)
        out_s[key] = float(steps.sum()) / 1e9
        per_step[key] = steps.tolist()
    return out_s, per_step, low_in_use


def _top_kernels(data: TraceData, classes: list, is_kernel: np.ndarray) -> list[KernelStat]:
    gpu = data.gpu
    if not is_kernel.any():
        return []
    names = gpu.name[is_kernel]
    dur = (gpu.end - gpu.start)[is_kernel].astype(np.float64)
    totals = np.bincount(names, weights=dur, minlength=len(data.names))
    counts = np.bincount(names, minlength=len(data.names))
    grand = totals.sum()
    out = []
    for i in np.argsort(-totals, kind="stable")[:TOP_KERNELS]:
        if counts[i] == 0:
            break
        c = classes[i]
        name = data.names[i]
        out.append(
            KernelStat(
                name=name,
                short_name=short_name(name),
                count=int(counts[i]),
                total_s=float(totals[i]) / 1e9,
                mean_us=float(totals[i]) / counts[i] / 1e3,
                share=float(totals[i] / grand) if grand else 0.0,
                group=c.group,
                matmul=c.matmul,
                tensor_core=c.tensor_core,
                precision=c.precision,
            )
        )
    return out


def _stream_idle(data: TraceData, scope: np.ndarray, launches: LaunchInfo) -> list[StreamIdle]:
    gpu = data.gpu
    rows = np.flatnonzero(scope)
    return idle_by_stream(gpu.device[rows], gpu.stream[rows], gpu.start[rows], gpu.end[rows],
                          launches.start[rows])


def idle_by_stream(device: np.ndarray, stream: np.ndarray, start: np.ndarray, end: np.ndarray,
                   launch: np.ndarray, short_gap_ns: int = SHORT_GAP_NS) -> list[StreamIdle]:
    """Idle time of each stream between consecutive activities, split by cause (ns arrays in).

    ``launch`` is the start of each activity's launch call, or -1 when unknown (then the gap
    cannot be host wait).
    """
    if len(start) == 0:
        return []
    order = np.lexsort((start, stream, device))
    device, stream, start, end, launch = device[order], stream[order], start[order], end[order], launch[order]
    key = device.astype(np.int64) * (1 << 40) + stream
    bounds = np.flatnonzero(np.diff(key)) + 1
    out = []
    for part in np.split(np.arange(len(start)), bounds):
        s, e = start[part], end[part]
        prev_end = np.maximum.accumulate(e)[:-1]
        gap = np.maximum(s[1:] - prev_end, 0)
        after = launch[part][1:]
        host_wait = (after >= 0) & (after > prev_end)
        short = ~host_wait & (gap < short_gap_ns)
        other = ~host_wait & ~short
        out.append(
            StreamIdle(
                device=int(device[part[0]]),
                stream=int(stream[part[0]]),
                activities=len(part),
                busy_s=iv.total(iv.merge(s, e)) / 1e9,
                host_wait_s=int(gap[host_wait].sum()) / 1e9,
                short_gap_s=int(gap[short].sum()) / 1e9,
                other_s=int(gap[other].sum()) / 1e9,
            )
        )
    return out


def _memcpy_stats(data: TraceData, scope: np.ndarray) -> list[MemcpyStat]:
    gpu = data.gpu
    rows = np.flatnonzero(scope & (gpu.kind == MEMCPY))
    groups: dict[tuple[str, str], list[int]] = {}
    kinds = {int(i): memcpy_kind(data.names[int(i)]) for i in np.unique(gpu.name[rows])}
    for r in rows.tolist():
        groups.setdefault(kinds[int(gpu.name[r])], []).append(r)
    out = []
    for (direction, memory), rs in sorted(groups.items()):
        idx = np.array(rs)
        nbytes = gpu.nbytes[idx]
        busy_ns = int((gpu.end[idx] - gpu.start[idx]).sum())
        known = int(nbytes[nbytes >= 0].sum())
        out.append(
            MemcpyStat(
                direction=direction,
                host_memory=memory,
                count=len(rs),
                bytes=known,
                busy_s=busy_ns / 1e9,
                bandwidth_bytes_per_s=known / (busy_ns / 1e9) if busy_ns and known else None,
            )
        )
    return out
