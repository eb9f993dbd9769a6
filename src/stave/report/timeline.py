"""The step timeline as Chrome trace / Perfetto JSON (``stave doctor --timeline``).

Open the file in ui.perfetto.dev or chrome://tracing. Each process (rank) shows one track of
optimizer steps, one track per phase (data wait, host-to-device, forward, backward, optimizer)
and counter tracks of the host samples (CPU, memory, and GPU where measured).

Phase slices come from the main thread's recorded spans. A step without spans gets its phases
laid end to end inside the step, flagged ``"layout": "sequential"`` in the slice's args: the
durations are measured, the positions are not. Times are microseconds from each rank's own first
measurement: clocks of different hosts are never compared.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from stave.measure.record import RunRecord
from stave.measure.steps import MEASURED_PHASES
from stave.report.doctor_data import time_origin_ns

TIMELINE_FORMAT = "stave.timeline/1"

# Thread ids inside a rank's process: 0 for the steps, then one per measured phase.
_STEP_TID = 0
_PHASE_TID = {phase: i + 1 for i, phase in enumerate(MEASURED_PHASES)}

_GIB = float(2**30)

# Counter tracks: (track name, ((series, HostSample field, scale), ...)).
_COUNTERS: tuple[tuple[str, tuple[tuple[str, str, float], ...]], ...] = (
    ("CPU % of one core", (("main", "cpu_main_pct", 1.0), ("workers", "cpu_workers_pct", 1.0))),
    ("machine CPU %", (("busy", "cpu_system_pct", 1.0), ("iowait", "iowait_pct", 1.0))),
    ("host memory GiB", (("RSS", "rss_bytes", 1 / _GIB), ("available", "mem_available_bytes", 1 / _GIB))),
    ("GPU %", (("util", "gpu_util_pct", 1.0),)),
    ("GPU memory GiB", (("used", "gpu_mem_used_bytes", 1 / _GIB), ("allocated", "cuda_allocated_bytes", 1 / _GIB))),
)


def _us(ns: int) -> float:
    return ns / 1e3


def timeline_json(record: RunRecord, pid: int | None = None) -> dict[str, Any]:
    """The Chrome trace of one process's steps, phases and host counters."""
    return {
        "traceEvents": list(timeline_events(record, pid)),
        "displayTimeUnit": "ms",
        "otherData": {"format": TIMELINE_FORMAT, "script": record.run.script, "ranks": [record.run.rank]},
    }


def timeline_json_ranks(records: Sequence[RunRecord]) -> dict[str, Any]:
    """The Chrome trace of several ranks, one process per rank (each on its own time origin)."""
    events: list[dict[str, Any]] = []
    for record in records:
        events.extend(timeline_events(record))
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "format": TIMELINE_FORMAT,
            "script": records[0].run.script if records else "",
            "ranks": [r.run.rank for r in records],
            "clock": "each rank starts at its own first measurement; ranks are not aligned in time",
        },
    }


def timeline_events(record: RunRecord, pid: int | None = None) -> Iterable[dict[str, Any]]:
    """Metadata, step and phase slices (``"X"``), and counters (``"C"``) of one process."""
    run = record.run
    pid = run.rank if pid is None else pid
    origin = time_origin_ns(record)
    name = (run.script or "script").rsplit("/", 1)[-1]
    yield _meta("process_name", pid, 0, {"name": f"rank {run.rank} · {name} (pid {run.pid})"})
    yield _meta("process_sort_index", pid, 0, {"sort_index": run.rank})
    yield _meta("thread_name", pid, _STEP_TID, {"name": "optimizer steps"})
    for phase, tid in _PHASE_TID.items():
        yield _meta("thread_name", pid, tid, {"name": phase})
        yield _meta("thread_sort_index", pid, tid, {"sort_index": tid})

    spans_by_step: dict[int, list[Any]] = {}
    for span in record.spans:
        spans_by_step.setdefault(span.step, []).append(span)

    slices: list[dict[str, Any]] = []
    for step in record.steps:
        slices.append(_slice(f"step {step.index}", "step", pid, _STEP_TID, step.start_ns - origin, step.wall_ns, {
            "step": step.index,
            "samples": step.samples,
            "counted": step.counted,
            "warmup": step.warmup,
            **{f"{p}_ms": step.phase_ns(p) / 1e6 for p in (*MEASURED_PHASES, "other")},
        }))
        if step.index not in spans_by_step:
            slices.extend(_sequential_phases(step, pid, origin))
    for step_index, spans in spans_by_step.items():
        for span in spans:
            tid = _PHASE_TID.get(span.phase)
            if tid is None or span.duration_ns < 0:
                continue
            slices.append(_slice(span.phase, "phase", pid, tid, span.start_ns - origin, span.duration_ns,
                                 {"step": step_index}))
    slices.extend(_counters(record, pid, origin))
    slices.sort(key=lambda e: (e["ts"], 0 if e["ph"] == "X" else 1))
    yield from slices


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}


def _slice(name: str, cat: str, pid: int, tid: int, start_ns: int, dur_ns: int,
           args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": _us(start_ns),
            "dur": _us(max(0, dur_ns)), "args": args}


def _sequential_phases(step: Any, pid: int, origin: int) -> Iterable[dict[str, Any]]:
    cursor = step.start_ns - origin
    for phase in MEASURED_PHASES:
        duration = step.phase_ns(phase)
        if duration > 0:
            yield _slice(phase, "phase", pid, _PHASE_TID[phase], cursor, duration,
                         {"step": step.index, "layout": "sequential"})
            cursor += duration


def _counters(record: RunRecord, pid: int, origin: int) -> Iterable[dict[str, Any]]:
    for sample in record.host:
        for track, series in _COUNTERS:
            # An absent reading is left out of the event rather than drawn as 0.
            args = {label: getattr(sample, key) * scale for label, key, scale in series
                    if getattr(sample, key) is not None}
            if args:
                yield {"ph": "C", "name": track, "pid": pid, "tid": 0, "ts": _us(sample.t_ns - origin), "args": args}
