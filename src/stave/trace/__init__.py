"""``stave trace``: analyse torch.profiler (Kineto) traces, from one GPU to many ranks, in bounded memory.

Public entry points:

* :func:`analyze_trace` — one file -> :class:`TraceAnalysis`;
* :class:`ProfileWindow` (in :mod:`stave.capture.profile_window`) — record a trace of N steps.

The findings over a set of traces (``stave trace``) are :func:`stave.diagnose.trace_report.analyze_paths`:
trace reads and measures, it never diagnoses. The pieces, one concern per module: ``reader`` (streaming parse), ``tables`` (columnar events),
``steps``, ``breakdown``, ``gpu``, ``kernels``, ``launches``, ``syncs``, ``nesting``, ``ranks``.
"""

from __future__ import annotations

from stave.trace.analysis import TraceAnalysis, analyze_trace

__all__ = [
    "TraceAnalysis",
    "analyze_trace",
]
