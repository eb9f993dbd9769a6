"""Pieces the trace rules share: the speedup estimate and building a trace Finding.

Every trace rule estimates ``est_speedup = T / T'`` with ``T`` the median step time of the trace and
``T' = T - saved``, where ``saved`` is the mean time per step of the one phase its fix addresses,
shrunk as that fix would shrink it (each docs page gives its ``saved``). ``T'`` is never taken
below the GPU's own busy time, since removing stalls cannot make the kernels faster.
"""

from __future__ import annotations

from typing import Any, Iterable

from stave.diagnose.finding import Finding
from stave.diagnose.rules._helpers import REPORT_MIN_SPEEDUP, make_finding, tidy

__all__ = ["REPORT_MIN_SPEEDUP", "mean", "speedup", "tidy", "trace_finding"]


def speedup(step_s: float, saved_s: float, floor_s: float = 0.0) -> float:
    """T / max(T - saved, floor); 1.0 when the step time is unknown."""
    if step_s <= 0:
        return 1.0
    remaining = max(step_s - max(saved_s, 0.0), floor_s, step_s * 1e-3)
    return max(1.0, step_s / remaining)


def trace_finding(
    finding_id: str,
    est_speedup: float,
    title: str,
    evidence: dict[str, Any],
    fix: str,
    explanation: str = "",
    lines: Iterable[str] = (),
    severity: str | None = None,
) -> Finding:
    """A Finding from a trace, severity from the estimate unless given."""
    return make_finding(finding_id, est_speedup, title, evidence, fix, explanation, lines, severity, source="trace")


def mean(values: list[int] | list[float]) -> float:
    """Arithmetic mean; 0.0 for an empty list."""
    return float(sum(values)) / len(values) if values else 0.0
