"""The trace section of a doctor report (``stave doctor --profile-steps N``).

:mod:`stave.report.trace_section_lookup` looks these three functions up; ``trace`` is the
:class:`~stave.diagnose.trace_report.TraceReport` the doctor attached to ``DoctorResult.trace``.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from stave.report.trace_html import trace_body_html
from stave.report.trace_json import trace_json
from stave.report.trace_terminal import trace_renderable
from stave.diagnose.trace_report import TraceReport


def to_json(trace: TraceReport) -> dict[str, Any]:
    """The ``trace`` object of a ``stave.doctor/1`` report: the ``stave.trace/1`` report itself."""
    return trace_json(trace)


def render_terminal(trace: TraceReport, console: Console) -> None:
    """Print the trace analysis after the doctor's findings."""
    console.print(trace_renderable(trace))


def render_html(trace: TraceReport) -> str:
    """The trace analysis as an HTML fragment for the doctor's page."""
    return trace_body_html(trace)
