"""The doctor's JSON report, schema ``stave.doctor/1`` (documented in docs/schema.md).

:func:`doctor_json` builds it from a :class:`~stave.doctor.result.DoctorResult`;
:func:`validate_doctor_json` checks an object against the shipped JSON Schema.
"""

from __future__ import annotations

from typing import Any

from stave.doctor.result import DoctorResult, RankSummary, rank_summary
from stave.diagnose.finding import rank_findings
from stave.measure.record import RunRecord
from stave.measure.serialize import json_safe, to_dict
from stave.report import doctor_data as sec
from stave.report.trace_section_lookup import missing_trace_note, trace_renderer
from stave.report.schemas import schema_errors, validate_report

SCHEMA = "stave.doctor/1"


def doctor_json(result: DoctorResult) -> dict[str, Any]:
    """The ``stave.doctor/1`` report of ``result``: JSON-safe (no NaN, no numpy types)."""
    record = result.record
    origin = sec.time_origin_ns(record)
    trace_json = None
    to_json = trace_renderer("to_json") if result.trace is not None else None
    if to_json is not None:
        trace_json = to_json(result.trace)
    notes = sec.dedupe([*result.notes, *record.notes])
    trace_note = missing_trace_note(result.trace, "to_json")
    if trace_note:
        notes.append(trace_note)
    summary = sec.summary_section(result.summary, record)
    summary["stack_samples"] = record.stacks.sample_count(result.stack_steps)
    summary["stack_interval_s"] = record.stacks.interval_ns / 1e9 if record.stacks.interval_ns else None
    summary["achievable_step_s"] = result.achievable_step_s
    report = {
        "schema": SCHEMA,
        "run": sec.seconds_keys(to_dict(record.run)),
        "config": sec.seconds_keys(to_dict(record.config)),
        "summary": summary,
        "ranks": ranks_section(result, summary["utilization"]),
        "steps": sec.steps_section(record, origin),
        "utilization": sec.utilization_section(record, origin),
        "data_pipeline": sec.data_pipeline_section(record, result.pipeline),
        "device": sec.device_section(record),
        "hot_lines": sec.hot_lines_section(record, result.hot_lines, result.stack_steps),
        "probes": sec.seconds_keys(to_dict(record.probes)),
        "findings": [f.to_dict() for f in rank_findings(list(result.findings))],
        "notes": notes,
        "trace": trace_json,
    }
    if result.verification is not None:
        report["verify"] = result.verification.to_dict()
    return json_safe(report)


def rank_rows(result: DoctorResult) -> list[tuple[RankSummary, RunRecord | None]]:
    """Each rank's summary with its record (one row for a single process)."""
    ranks = list(result.ranks) or [rank_summary(result.record)]
    records = {r.run.rank: r for r in result.rank_records}
    if len(ranks) == 1 and not records:
        records[ranks[0].rank] = result.record
    return [(r, records.get(r.rank)) for r in sorted(ranks, key=lambda r: r.rank)]


def ranks_section(result: DoctorResult, main_utilization: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The ``ranks`` array: per rank, the summary's shape plus rank, hostname, pid and status.

    ``main_utilization``: the top-level summary's utilization, reused for the main record's rank.
    """
    rows = []
    for rs, record in rank_rows(result):
        reuse = main_utilization if record is result.record else None
        body = sec.summary_section(rs.summary, record, reuse)
        # The rank summary's peaks are authoritative when the rank's record did not travel back.
        body["peak_rss_bytes"] = rs.peak_rss_bytes if rs.peak_rss_bytes is not None else body["peak_rss_bytes"]
        body["peak_cuda_bytes"] = rs.peak_cuda_bytes if rs.peak_cuda_bytes is not None else body["peak_cuda_bytes"]
        rows.append({"rank": rs.rank, "hostname": rs.hostname, "pid": rs.pid, "status": rs.status, **body})
    return rows


def doctor_json_errors(obj: Any) -> list[str]:
    """Every way ``obj`` breaks ``stave.doctor/1`` ("path: message"; empty when valid)."""
    return schema_errors(obj, SCHEMA)


def validate_doctor_json(obj: Any) -> None:
    """Raise :class:`~stave.errors.FormatError` when ``obj`` is not a valid ``stave.doctor/1`` report."""
    validate_report(obj, SCHEMA)
