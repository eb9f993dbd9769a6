"""``stave trace``: analyse torch.profiler (Kineto) traces, from one GPU to many ranks, in bounded memory.

Public entry points:

* :func:`analyze_paths` — traces (files or directories) -> :class:`TraceReport` with findings;
* :func:`trace_findings` — the findings of a report (already in ``report.findings``);
* :func:`analyze_trace` — one file -> :class:`TraceAnalysis`;
* :class:`ProfileWindow` (in :mod:`stave.trace.profile_window`) — record a trace of N steps.

The pieces, one concern per module: ``reader`` (streaming parse), ``tables`` (columnar events),
``steps``, ``breakdown``, ``gpu``, ``kernels``, ``launches``, ``syncs``, ``nesting``, ``ranks``.
"""

from __future__ import annotations

from stave.trace.analysis import TraceAnalysis, analyze_trace
from stave.trace.report import SkippedFile, TraceReport, analyze_paths, trace_findings

__all__ = [
    "SkippedFile",
    "TraceAnalysis",
    "TraceReport",
    "analyze_paths",
    "analyze_trace",
    "trace_findings",
]
