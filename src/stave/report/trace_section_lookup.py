"""Where a doctor report picks up sections that other parts of stave render.

``stave doctor --profile-steps N`` attaches a trace analysis to ``DoctorResult.trace``. The trace
report owns how that looks: the module named by :data:`TRACE_SECTION_MODULE` (part of the trace
report, ``stave/report/trace_section.py``) provides three functions, each optional:

- ``to_json(trace) -> dict``: the ``trace`` object of a ``stave.doctor/1`` report;
- ``render_terminal(trace, console) -> None``: the section printed after the findings;
- ``render_html(trace) -> str``: an HTML fragment placed after the findings.

When the module or a function is missing, the doctor report leaves the trace out and says so in
its notes; it never guesses at the trace's shape.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from types import ModuleType
from typing import Any, Callable

log = logging.getLogger(__name__)

TRACE_SECTION_MODULE = "stave.report.trace_section"


def _trace_module() -> ModuleType | None:
    if importlib.util.find_spec(TRACE_SECTION_MODULE) is None:
        return None
    return importlib.import_module(TRACE_SECTION_MODULE)


def trace_renderer(kind: str) -> Callable[..., Any] | None:
    """The trace section's ``to_json`` / ``render_terminal`` / ``render_html``, or None if absent."""
    if kind not in ("to_json", "render_terminal", "render_html"):
        raise ValueError(f"unknown trace renderer {kind!r}")
    module = _trace_module()
    func = getattr(module, kind, None) if module is not None else None
    if func is None:
        log.debug("no %s.%s; the trace analysis is left out of this report", TRACE_SECTION_MODULE, kind)
    return func


def missing_trace_note(trace: Any, kind: str) -> str | None:
    """The note a report shows when it has a trace analysis but no renderer of ``kind`` for it."""
    if trace is None or trace_renderer(kind) is not None:
        return None
    return f"a profiler trace was analysed, but no report section for it is installed ({TRACE_SECTION_MODULE})"
