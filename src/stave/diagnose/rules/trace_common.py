"""Pieces the trace rules share: the speedup estimate and building a trace Finding.

Every trace rule estimates ``est_speedup = T / T'`` with ``T`` the median step time of the trace and
``T' = T - saved``, where ``saved`` is the mean time per step of the one phase its fix addresses,
shrunk as that fix would shrink it (each docs page gives its ``saved``). ``T'`` is never taken
below the GPU's own busy time, since removing stalls cannot make the kernels faster.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

from stave.diagnose.finding import Finding, severity_for_speedup

# Below this estimate a trace finding is not reported: step times on a busy machine vary by about
# this much, so the user could not confirm the gain and the report would fill with lint.
REPORT_MIN_SPEEDUP = 1.05
# Evidence keeps this many significant digits: enough to recompute an estimate, few enough to read.
EVIDENCE_DIGITS = 4


def speedup(step_s: float, saved_s: float, floor_s: float = 0.0) -> float:
    """T / max(T - saved, floor); 1.0 when the step time is unknown."""
    if step_s <= 0:
        return 1.0
    remaining = max(step_s - max(saved_s, 0.0), floor_s, step_s * 1e-3)
    return max(1.0, step_s / remaining)


def tidy(value: Any) -> Any:
    """Round floats to :data:`EVIDENCE_DIGITS` significant digits, recursively; NaN/inf become None."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        return float(f"{value:.{EVIDENCE_DIGITS}g}") if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): tidy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [tidy(v) for v in value]
    return value


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
    est = round(max(1.0, float(est_speedup)), 3)
    return Finding(
        id=finding_id,
        severity=severity or severity_for_speedup(est),
        est_speedup=est,
        title=title,
        evidence=tidy(evidence),
        fix=fix.strip("\n"),
        explanation=explanation,
        lines=list(lines),
        source="trace",
    )


def mean(values: list[int] | list[float]) -> float:
    """Arithmetic mean; 0.0 for an empty list."""
    return float(sum(values)) / len(values) if values else 0.0
