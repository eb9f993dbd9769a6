"""Fold the analysis of a ``--profile-steps`` trace into a doctor run.

The doctor attaches the returned :class:`~stave.diagnose.trace_report.TraceReport` to its result (the report
renderers show it through :mod:`stave.report.trace_section`) and merges the findings, keeping its
own finding where both produce the same ID (its measurements cover more steps).
"""

from __future__ import annotations

import logging
from pathlib import Path

from stave.diagnose.finding import Finding
from stave.errors import StaveError
from stave.diagnose.trace_report import TraceReport, analyze_paths

log = logging.getLogger(__name__)


def analyze_for_doctor(trace_path: str | Path) -> tuple[TraceReport | None, list[Finding]]:
    """(report, findings) of the trace; (None, []) when the trace cannot be read (logged)."""
    try:
        report = analyze_paths([trace_path])
    except StaveError as exc:
        log.warning("the profiler trace could not be analysed: %s", exc)
        return None, []
    return report, list(report.findings)
