"""The Finding type: one diagnosis with its evidence, estimated speedup and fix."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SEVERITIES: tuple[str, ...] = ("info", "warning", "critical")

# An estimated speedup of 1.5x or more is worth stopping for: it is the difference between a
# two-day and a three-day run. Below 1.1x the change is within what a noisy machine shows between
# runs, so it is worth knowing, not worth a warning.
CRITICAL_SPEEDUP = 1.5
WARNING_SPEEDUP = 1.1

DOCS_BASE = "docs/findings"

# Findings about the machine rather than the job: said first, since they change how every other
# finding of the run reads (a busy machine slows the job without being its fault).
MACHINE_IDS: tuple[str, ...] = ("MACHINE_BUSY",)


# Findings whose fix changes what the run learns, not only how fast it runs (a larger batch changes
# the optimization: the learning rate, the number of updates). Among fixes of similar worth the one
# that keeps the training the same goes first: such a finding ranks above a training-neutral one
# only when its estimate is larger by more than the step model's stated accuracy (the doctor's goal
# is an estimate within 1.5x of the measured gain), so only a lead the model is sure of puts it first.
CHANGES_LEARNING_IDS: tuple[str, ...] = ("SMALL_BATCH",)
CHANGES_LEARNING_RANK_MARGIN = 1.5


def severity_for_speedup(est_speedup: float) -> str:
    """Map an estimated speedup to a severity (thresholds above, with their reasons)."""
    if est_speedup >= CRITICAL_SPEEDUP:
        return "critical"
    if est_speedup >= WARNING_SPEEDUP:
        return "warning"
    return "info"


def docs_path(finding_id: str) -> str:
    """The docs page of a finding ID, relative to the repository root."""
    return f"{DOCS_BASE}/{finding_id}.md"


@dataclass(frozen=True)
class Finding:
    """One diagnosis.

    ``est_speedup`` is T / T', with T the measured step time (the docs page of each ID says which
    statistic) and T' the step time with only the phase the fix addresses shrunk as the fix would
    shrink it. 1.0 means the finding is about correctness or risk, not speed.
    ``evidence`` holds the measured numbers (seconds, bytes, fractions, counts) under names with units.
    ``fix`` is a concrete code change, tailored to this run where the measurements allow.
    ``certain`` is False when the timings behind the estimate were disturbed (another process held
    the job's cores: MACHINE_BUSY; or the rule's own probe spread even when repeated), so a
    timing-based estimate may not hold on a quiet machine.
    """

    id: str
    severity: str
    est_speedup: float
    title: str
    evidence: dict[str, Any]
    fix: str
    explanation: str = ""
    lines: list[str] = field(default_factory=list)
    rank: int | None = None
    source: str = "doctor"
    certain: bool = True
    # The step model's (before, after) inputs behind ``est_speedup``, where the model priced it: what
    # lets the doctor compose every fix into one achievable step time. Not part of the JSON.
    model_change: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity {self.severity!r} is not one of {SEVERITIES}")
        if not self.est_speedup >= 1.0:
            raise ValueError(f"{self.id}: est_speedup must be >= 1.0, got {self.est_speedup!r}")

    @property
    def docs(self) -> str:
        """Path of the docs page for this ID."""
        return docs_path(self.id)

    def to_dict(self) -> dict[str, Any]:
        """The finding as it appears in JSON reports."""
        return {
            "id": self.id,
            "severity": self.severity,
            "est_speedup": round(float(self.est_speedup), 3),
            "title": self.title,
            "explanation": self.explanation,
            "evidence": self.evidence,
            "lines": list(self.lines),
            "fix": self.fix,
            "docs": self.docs,
            "rank": self.rank,
            "source": self.source,
            "certain": self.certain,
        }


_SEVERITY_ORDER = {name: i for i, name in enumerate(SEVERITIES)}


def is_risk(finding: Finding) -> bool:
    """A critical finding about the run's survival or correctness rather than its speed
    (memory that will run out, workers reading wrong samples, a rank that died)."""
    return finding.severity == "critical" and finding.est_speedup < WARNING_SPEEDUP


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Order findings: the machine's first, then critical risks, then by estimated speedup, largest first.

    A critical risk (est_speedup 1.0: a leak that will end the run, a fork-unsafe handle that
    corrupts reads) matters more than any speedup: a faster run that crashes or learns from wrong
    data is worth nothing. A fix that changes what is learned (``CHANGES_LEARNING_IDS``) ranks as if
    its estimate were ``CHANGES_LEARNING_RANK_MARGIN`` times smaller. Ties are broken by severity,
    then ID, so the order is stable.
    """

    def key(f: Finding) -> tuple[int, int, float, int, str]:
        worth = f.est_speedup / CHANGES_LEARNING_RANK_MARGIN if f.id in CHANGES_LEARNING_IDS else f.est_speedup
        return (0 if f.id in MACHINE_IDS else 1, 0 if is_risk(f) else 1, -worth,
                -_SEVERITY_ORDER[f.severity], f.id)

    return sorted(findings, key=key)
