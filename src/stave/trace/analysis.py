"""The analysis of one trace file: steps, additive breakdown, GPU, launches, syncs, top ops.

:func:`analyze_trace` runs the per-concern analyses (one module each) over the columnar tables of
one file and collects their results in a :class:`TraceAnalysis`; it has no side effects.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stave.analyze.stats import percentile
from stave.measure.steps import step_time_s
from stave.trace import intervals as iv
from stave.trace.breakdown import StepBreakdown, cpu_breakdown, gpu_breakdown, kernel_groups, name_mask
from stave.trace.gpu import GpuSummary, analyze_gpu
from stave.trace.hta_metrics import hta_section
from stave.trace.kernels import is_comm_name
from stave.trace.launches import LaunchBound, launch_bound, launch_info
from stave.trace.nesting import OpStat, op_tree, python_tree, top_ops
from stave.trace.steps import OwnedGpu, StepWindows, find_steps, own_gpu
from stave.trace.syncs import SyncSummary, analyze_syncs
from stave.trace.tables import ANNOTATION, CPU_OP, RUNTIME, TraceData, load_trace

log = logging.getLogger(__name__)

_RANK_IN_NAME = re.compile(r"rank[-_.]?(\d+)", re.IGNORECASE)


@dataclass
class StepInfo:
    """One step: its number, start (seconds since the first step) and duration, and its parts (s)."""

    number: int
    start_s: float
    duration_s: float
    parts_s: dict[str, float]


@dataclass
class TraceAnalysis:
    """Everything stave found in one trace file (one rank)."""

    path: str
    rank: int
    rank_source: str
    world_size: int | None
    kind: str
    device_name: str | None
    events: int
    uncompressed_bytes: int
    compressed: bool
    steps_marked: bool
    steps: list[StepInfo]
    parts: tuple[str, ...]
    breakdown_share: dict[str, float]
    breakdown_mean_s: dict[str, float]
    step_time_median_s: float
    step_time_mean_s: float
    step_time_p90_s: float
    gpu: GpuSummary | None = None
    launch: LaunchBound | None = None
    syncs: SyncSummary | None = None
    top_ops: list[OpStat] = field(default_factory=list)
    collective_s_per_step: float = 0.0
    memory_peak_bytes: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # (major, minor) from the trace's deviceProperties; None when the trace does not say.
    compute_capability: tuple[int, int] | None = None
    # Numbers with HTA's definitions (stave.trace.hta_metrics); None for a CPU-only trace.
    hta: dict[str, Any] | None = None

    @property
    def step_count(self) -> int:
        """Number of analysed steps."""
        return len(self.steps)

    def part_mean_s(self, part: str) -> float:
        """Mean seconds per step of one breakdown part (0 when the part does not exist here)."""
        return self.breakdown_mean_s.get(part, 0.0)


def rank_of(path: str, metadata: dict[str, Any], fallback: int) -> tuple[int, str, int | None]:
    """(rank, where it came from, world size): ``distributedInfo``, else the file name, else the order."""
    info = metadata.get("distributedInfo")
    world = None
    if isinstance(info, dict):
        ws = info.get("world_size")
        world = ws if isinstance(ws, int) and not isinstance(ws, bool) else None
        rank = info.get("rank")
        if isinstance(rank, int) and not isinstance(rank, bool):
            return rank, "distributedInfo", world
    m = _RANK_IN_NAME.search(Path(path).name)
    if m:
        return int(m.group(1)), "file name", world
    return fallback, "order given", world


def _device_name(metadata: dict[str, Any]) -> str | None:
    props = metadata.get("deviceProperties")
    if isinstance(props, list) and props and isinstance(props[0], dict):
        name = props[0].get("name")
        return name if isinstance(name, str) else None
    return None


def _compute_capability(metadata: dict[str, Any]) -> tuple[int, int] | None:
    props = metadata.get("deviceProperties")
    if isinstance(props, list) and props and isinstance(props[0], dict):
        major, minor = props[0].get("computeMajor"), props[0].get("computeMinor", 0)
        if type(major) is int and type(minor) is int:
            return major, minor
    return None


def analyze_trace(path: str | Path, order: int = 0) -> TraceAnalysis:
    """Read and analyse one trace file (raises FormatError/InputError for a bad file)."""
    data = load_trace(path)
    return analyze_data(data, order)


def analyze_data(data: TraceData, order: int = 0) -> TraceAnalysis:
    """Analyse already-loaded tables (see :func:`analyze_trace`)."""
    windows = find_steps(data)
    has_gpu = len(data.gpu) > 0
    launches = launch_info(data)
    owned = own_gpu(data, windows, launches)
    breakdown = gpu_breakdown(data, windows, owned) if has_gpu else cpu_breakdown(data, windows)
    rank, rank_source, world = rank_of(data.path, data.metadata, order)
    durations = (windows.duration / 1e9).tolist()
    notes = _notes(data, windows)
    result = TraceAnalysis(
        path=data.path,
        rank=rank,
        rank_source=rank_source,
        world_size=world,
        kind="gpu" if has_gpu else "cpu",
        device_name=_device_name(data.metadata),
        events=data.stats.events,
        uncompressed_bytes=data.stats.uncompressed_bytes,
        compressed=data.stats.compressed,
        steps_marked=windows.marked,
        steps=_step_infos(windows, breakdown),
        parts=breakdown.parts,
        breakdown_share=breakdown.shares(),
        breakdown_mean_s=breakdown.mean_s(),
        step_time_median_s=step_time_s(durations),
        step_time_mean_s=sum(durations) / len(durations) if durations else 0.0,
        step_time_p90_s=percentile(durations, 90),
        memory_peak_bytes=dict(data.memory_peak_bytes),
        notes=notes,
        compute_capability=_compute_capability(data.metadata),
    )
    ops = op_tree(data)
    result.top_ops = top_ops(data, ops, windows.start, windows.end)
    result.collective_s_per_step = _collective_per_step(data, windows, owned)
    if has_gpu:
        result.gpu = analyze_gpu(data, windows, launches, owned)
        result.launch = launch_bound(data, launches, owned.in_steps, windows.start, windows.end)
        result.syncs = analyze_syncs(data, windows, ops, python_tree(data))
        result.hta = hta_section(data, windows)
        result.notes.extend(_outside_notes(result.hta))
    return result


def _step_infos(windows: StepWindows, breakdown: StepBreakdown) -> list[StepInfo]:
    t0 = int(windows.start[0]) if len(windows) else 0
    out = []
    for i in range(len(windows)):
        parts = {p: int(breakdown.values[i, j]) / 1e9 for j, p in enumerate(breakdown.parts)}
        out.append(
            StepInfo(
                number=int(windows.numbers[i]),
                start_s=(int(windows.start[i]) - t0) / 1e9,
                duration_s=int(windows.duration[i]) / 1e9,
                parts_s=parts,
            )
        )
    return out


def _collective_per_step(data: TraceData, windows: StepWindows, owned: OwnedGpu) -> float:
    """Mean time per step inside collectives: the steps' own comm kernels on a GPU, collective spans
    on the host."""
    if len(windows) == 0:
        return 0.0
    if len(data.gpu):
        comm = kernel_groups(data)
        spans = iv.merge(owned.start[comm], owned.end[comm])
    else:
        host = data.host
        mask = name_mask(data, host.name, is_comm_name) & ((host.cat == ANNOTATION) | (host.cat == CPU_OP))
        spans = iv.merge(host.start[mask], host.end[mask])
    return float(iv.measure_in(spans, windows.start, windows.end).mean()) / 1e9


def _notes(data: TraceData, windows: StepWindows) -> list[str]:
    notes = []
    if not windows.marked:
        notes.append(
            "no ProfilerStep markers: the whole trace is analysed as one step "
            "(record with a torch.profiler.schedule and call prof.step() once per training step "
            "to get per-step numbers)"
        )
    if data.skipped_no_time:
        notes.append(f"{data.skipped_no_time} events without a timestamp were skipped")
    if data.stats.skipped_events:
        notes.append(f"{data.stats.skipped_events} malformed events were skipped")
    if data.other_phases:
        phases = ", ".join(f"{k!r}: {v}" for k, v in sorted(data.other_phases.items()))
        notes.append(f"events of phases stave does not read were ignored ({phases})")
    if len(data.gpu) and not np.any(data.gpu.corr >= 0):
        notes.append("GPU activities carry no correlation ids: launch and host-wait analysis is limited")
    notes.extend(_long_runtime_calls(data, windows))
    return notes


def _outside_notes(hta: dict[str, Any]) -> list[str]:
    """A note when GPU work launched before the first profiled step runs inside the step windows
    (the per-step numbers leave it out: no profiled step launched it)."""
    outside = hta["facts"].get("outside_steps") or {}
    before = outside.get("launched_before_first_step") or {}
    if before.get("inside_step_windows_us", 0) <= 0:
        return []
    return [
        f"{before['count']} GPU activities ({before['inside_step_windows_us'] / 1e3:.3g} ms inside the step windows) "
        "were launched before the first profiled step: the tail of an unprofiled iteration. The per-step "
        "numbers leave it out (no profiled step launched it); the hta section's facts.outside_steps gives it apart"
    ]


# A training step's runtime calls are launches and allocations of microseconds; one call that alone
# covers a fifth of a step is start-up work (CUDA context creation, cuDNN/cuBLAS handles, NCCL
# communicators, the caching allocator's first cudaMalloc) inside the profiled window.
LONG_RUNTIME_SHARE = 0.20
# Calls that wait for the GPU are long by design; the sync analysis covers them.
_WAITING_CALL_WORDS = ("Synchronize", "Memcpy", "StreamWait", "EventQuery", "StreamQuery")


def _long_runtime_calls(data: TraceData, windows: StepWindows) -> list[str]:
    """A note for the longest non-waiting runtime call when it covers a large share of its step."""
    host = data.host
    rows = np.flatnonzero(host.cat == RUNTIME)
    if not len(rows) or not len(windows):
        return []
    step = windows.step_of(host.start[rows])
    inside = step >= 0
    rows, step = rows[inside], step[inside]
    share = (host.end[rows] - host.start[rows]) / np.maximum(windows.duration[step], 1)
    for k in np.argsort(-share):
        if share[k] < LONG_RUNTIME_SHARE:
            return []
        name = data.names[int(host.name[rows[k]])]
        if any(word in name for word in _WAITING_CALL_WORDS):
            continue
        seconds = int(host.end[rows[k]] - host.start[rows[k]]) / 1e9
        where = f"step {int(windows.numbers[step[k]])}" if windows.marked else "the trace"
        return [
            f"one runtime call, {name}, takes {seconds:.3g} s ({share[k]:.0%} of {where}): start-up work "
            "(GPU context, library handles, lazy kernel loading, first allocations) was profiled; the breakdown and GPU "
            "utilization describe start-up, not training. Profile steps after warm-up: "
            "torch.profiler.schedule(wait=1, warmup=1, active=3) and prof.step() once per step"
        ]
    return []
