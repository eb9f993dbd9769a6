"""Fold the analysis of a ``--profile-steps`` trace into a doctor run.

The doctor attaches the returned :class:`~stave.diagnose.trace_report.TraceReport` to its result (the report
renderers show it through :mod:`stave.report.trace_section`) and merges the findings, keeping its
own finding where both produce the same ID (its measurements cover more steps).
"""

from __future__ import annotations

import logging
from pathlib import Path

from stave.diagnose.finding import Finding, rank_findings
from stave.diagnose.trace_report import TraceReport, analyze_paths
from stave.doctor.result import DoctorResult
from stave.errors import StaveError

log = logging.getLogger(__name__)


def analyze_for_doctor(trace_path: str | Path) -> tuple[TraceReport | None, list[Finding]]:
    """(report, findings) of the trace; (None, []) when the trace cannot be read (logged)."""
    try:
        report = analyze_paths([trace_path])
    except StaveError as exc:
        log.warning("the profiler trace could not be analysed: %s", exc)
        return None, []
    return report, list(report.findings)


def fold_trace(result: DoctorResult, trace_path: str | Path) -> None:
    """Attach the trace's analysis to ``result`` and add the findings it has that the doctor has not."""
    analysis, findings = analyze_for_doctor(trace_path)
    result.trace = analysis
    known = {f.id for f in result.findings}
    result.findings = rank_findings(result.findings + [f for f in findings if f.id not in known])
