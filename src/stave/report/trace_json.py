"""The ``stave.trace/1`` JSON report of a :class:`~stave.diagnose.trace_report.TraceReport`.

Every field is documented in docs/schema.md ("stave.trace/1"); the JSON Schema lives in
``stave/report/schemas/stave.trace-1.schema.json``. Times are seconds, sizes bytes, shares
fractions in [0, 1]; a value the trace does not provide is ``null``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from stave.trace.analysis import TraceAnalysis
from stave.measure.serialize import json_safe
from stave.diagnose.trace_report import TraceReport

TRACE_SCHEMA = "stave.trace/1"


def trace_entry(t: TraceAnalysis) -> dict[str, Any]:
    """One file's summary: identity, step statistics, breakdown, top ops, notes."""
    return {
        "path": t.path,
        "rank": t.rank,
        "rank_source": t.rank_source,
        "world_size": t.world_size,
        "kind": t.kind,
        "device_name": t.device_name,
        "events": t.events,
        "uncompressed_bytes": t.uncompressed_bytes,
        "compressed": t.compressed,
        "steps_marked": t.steps_marked,
        "step_count": t.step_count,
        "step_time_s": {"median": t.step_time_median_s, "mean": t.step_time_mean_s, "p90": t.step_time_p90_s},
        "parts": list(t.parts),
        "breakdown": dict(t.breakdown_share),
        "breakdown_mean_s": dict(t.breakdown_mean_s),
        "collective_s_per_step": t.collective_s_per_step,
        "memory_peak_bytes": dict(t.memory_peak_bytes),
        "top_ops": [dataclasses.asdict(o) for o in t.top_ops],
        "notes": list(t.notes),
    }


def gpu_entry(t: TraceAnalysis) -> dict[str, Any] | None:
    """The GPU analysis of one rank (None for a CPU-only trace)."""
    g = t.gpu
    if g is None:
        return None
    out = {
        "rank": t.rank,
        "devices": g.devices,
        "span_s": g.span_s,
        "utilization": g.utilization,
        "kernel_busy_s": g.kernel_busy_s,
        "memcpy_busy_s": g.memcpy_busy_s,
        "memset_busy_s": g.memset_busy_s,
        "compute_busy_s": g.compute_busy_s,
        "communication_busy_s": g.communication_busy_s,
        "communication_overlap": g.communication_overlap,
        "time_by_group_s": g.time_by_group_s,
        "matmul_s": g.matmul_s,
        "low_precision_in_use": g.low_precision_in_use,
        "idle_s": {"host_wait": g.idle_host_wait_s, "short_gap": g.idle_short_gap_s, "other": g.idle_other_s},
        "streams": [dataclasses.asdict(s) for s in g.streams],
        "top_kernels": [dataclasses.asdict(k) for k in g.top_kernels],
        "memcpy": [dataclasses.asdict(m) for m in g.memcpy],
        "launch_bound": None,
        "syncs": None,
    }
    if t.launch is not None:
        lb = t.launch
        out["launch_bound"] = {
            "kernels_with_launch": lb.kernels_with_launch,
            "launch_bound_kernels": lb.launch_bound_kernels,
            "stretches": lb.stretches,
            "stretch_kernels": lb.stretch_kernels,
            "longest_stretch_kernels": lb.longest_stretch_kernels,
            "stretch_span_s": lb.stretch_span_ns / 1e9,
            "gpu_idle_in_stretches_s": lb.stretch_idle_ns / 1e9,
        }
    if t.syncs is not None:
        s = t.syncs
        out["syncs"] = {
            "calls": s.calls,
            "calls_per_step": s.calls_per_step,
            "blocked_s": s.blocked_s,
            "gpu_idle_after_s": sum(s.gpu_idle_after_ns_per_step) / 1e9,
            "sites": [dataclasses.asdict(x) for x in s.sites],
            "largest": None if s.largest_call is None else {
                "call": s.largest_call, "op": s.largest_op, "blocked_s": s.largest_blocked_s,
                "step": s.largest_step, "share_of_step": s.largest_share,
            },
        }
    return out


def trace_json(report: TraceReport) -> dict[str, Any]:
    """The whole report as a ``stave.trace/1`` dict."""
    steps = [
        {"rank": t.rank, "step": s.number, "start_s": s.start_s, "duration_s": s.duration_s, "parts_s": s.parts_s}
        for t in report.traces
        for s in t.steps
    ]
    return json_safe(
        {
            "schema": TRACE_SCHEMA,
            "traces": [trace_entry(t) for t in report.traces],
            "steps": steps,
            "gpu": [g for g in (gpu_entry(t) for t in report.traces) if g is not None],
            "hta": [{"rank": t.rank, "path": t.path, **t.hta} for t in report.traces if t.hta is not None],
            "ranks": [dataclasses.asdict(r) for r in report.rank_timings],
            "findings": [f.to_dict() for f in report.findings],
            "skipped": [dataclasses.asdict(s) for s in report.skipped],
            "notes": list(report.notes),
        }
    )
