"""What ``stave doctor --verify`` measured: per top finding, the injected fix's measured speedup beside the estimate.

Plain data for the renderers (:mod:`stave.report`); :mod:`stave.doctor.verify` fills it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stave.analyze.stats import median

# What became of a finding's verification.
STATUSES = (
    "kept",            # measured; the loss check passed (or does not apply: the fix changes learning)
    "reverted",        # the loss check failed: the fix changes the results, so it would not be kept
    "crashed",         # the script failed with the fix
    "not_applicable",  # the fix does not apply on this machine (reason)
    "no_effect",       # the fix found nothing to change in this script (reason)
    "not_verifiable",  # no injectable fix: it needs a code change
    "unmeasured",      # the runs gave no step timings (the script ended before warm-up + 3 steps)
    "baseline_failed", # the script failed without any fix
    "interrupted",     # Ctrl-C before it was measured
)

WRITES_WARNING = ("--verify runs the script again (a baseline and a fixed run per pair): whatever the script "
                  "writes (checkpoints, logs, outputs) is written again by each run")


@dataclass
class VerifiedFinding:
    """One top finding and what its verification found.

    ``ratios``: baseline over fixed per measured pair (> 1: the fix is faster), ``measured_speedup``
    their median and ``interval`` their (min, max). ``statistic`` is what each run gives: its median
    step time after warm-up ("step_s"), its mean ("mean_step_s") or its samples per second ("samples_per_s"). ``loss``: the
    loss check (max_dev, tolerance, input_dev, passed, text), None when it was not run.
    """

    finding_id: str
    rank: int
    title: str
    est_speedup: float
    status: str
    fixes: str = ""
    reason: str | None = None
    statistic: str = "step_s"
    ratios: list[float] = field(default_factory=list)
    baseline_values: list[float] = field(default_factory=list)
    fixed_values: list[float] = field(default_factory=list)
    loss: dict[str, Any] | None = None
    fix_report: list[dict[str, Any]] = field(default_factory=list)
    changes_learning: bool = False

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")

    @property
    def measured_speedup(self) -> float | None:
        """Median of the pair ratios (None before any pair was measured)."""
        return median(self.ratios) if self.ratios else None

    @property
    def interval(self) -> tuple[float, float] | None:
        """(min, max) of the pair ratios."""
        return (min(self.ratios), max(self.ratios)) if self.ratios else None

    def to_dict(self) -> dict[str, Any]:
        """As it appears in the JSON report's ``verify.findings``."""
        return {
            "id": self.finding_id, "rank": self.rank, "title": self.title, "est_speedup": round(self.est_speedup, 3),
            "status": self.status, "fixes": self.fixes, "reason": self.reason, "statistic": self.statistic,
            "measured_speedup": self.measured_speedup, "interval": list(self.interval) if self.interval else None,
            "pairs": len(self.ratios), "ratios": list(self.ratios), "baseline_values": list(self.baseline_values),
            "fixed_values": list(self.fixed_values), "loss_check": self.loss, "fix_report": list(self.fix_report),
            "changes_learning": self.changes_learning,
        }


@dataclass
class Verification:
    """The verification of the top findings, in their rank order."""

    findings: list[VerifiedFinding] = field(default_factory=list)
    pairs: int = 0
    steps_per_run: int = 0
    warmup_steps: int = 0
    interrupted: bool = False
    notes: list[str] = field(default_factory=lambda: [WRITES_WARNING])

    def to_dict(self) -> dict[str, Any]:
        """The JSON report's ``verify`` section."""
        return {"pairs": self.pairs, "steps_per_run": self.steps_per_run, "warmup_steps": self.warmup_steps,
                "interrupted": self.interrupted, "notes": list(self.notes),
                "findings": [f.to_dict() for f in self.findings]}
