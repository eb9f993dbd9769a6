"""The doctor's result: what the report renderers (terminal, JSON, HTML) take as input.

The doctor facade (:mod:`stave.doctor.facade`) builds it from one or more
:class:`~stave.measure.record.RunRecord` (one per rank) and the findings. What the renderers need
beyond the records (the step summary, the loader's per-sample costs, the hot lines) is computed
here once; renderers only read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stave.analyze.breakdown import StepSummary, summarize_steps
from stave.analyze.hotlines import REPORT_LINES_LIMIT, HotLine, hot_lines, stack_window
from stave.analyze.pipeline import PipelineSummary, summarize_pipeline
from stave.diagnose.finding import Finding
from stave.measure.ranks import rank_status
from stave.measure.record import RunRecord


@dataclass
class RankSummary:
    """One rank (or the single process) as it appears side by side in reports.

    ``status``: "ok", "crashed" (the script raised), "killed" (the record stopped updating and the
    process is gone), or "interrupted".
    """

    rank: int
    hostname: str
    pid: int
    status: str
    summary: StepSummary
    peak_rss_bytes: int | None = None
    peak_cuda_bytes: int | None = None


@dataclass
class DoctorResult:
    """Everything a doctor report shows."""

    record: RunRecord
    summary: StepSummary
    findings: list[Finding]
    ranks: list[RankSummary] = field(default_factory=list)
    rank_records: list[RunRecord] = field(default_factory=list)
    trace: Any = None
    notes: list[str] = field(default_factory=list)
    # The step time if every speed finding's fix were applied (the step model, all fixes at once).
    achievable_step_s: float | None = None
    # ``stave doctor --verify``: the top findings' fixes injected and measured (a
    # :class:`stave.doctor.verification.Verification`), None without --verify.
    verification: Any = None
    # Derived from ``record`` on creation, once: what the renderers show beside the step summary.
    pipeline: PipelineSummary | None = field(init=False, default=None)
    stack_steps: set[int] | None = field(init=False, default=None)
    hot_lines: list[HotLine] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.pipeline = summarize_pipeline(self.record)
        self.stack_steps, _window = stack_window(self.record)
        self.hot_lines = hot_lines(self.record.stacks, steps=self.stack_steps, limit=REPORT_LINES_LIMIT)


def rank_summary(record: RunRecord, status: str | None = None) -> RankSummary:
    """Summarize one record as a rank row."""
    rss = [s.rss_bytes for s in record.host if s.rss_bytes is not None]
    cuda = [s.cuda_peak_bytes for s in record.host if s.cuda_peak_bytes is not None]
    if status is None:
        status = rank_status(record)
    return RankSummary(
        rank=record.run.rank,
        hostname=record.run.hostname,
        pid=record.run.pid,
        status=status,
        summary=summarize_steps(record.steps),
        peak_rss_bytes=max(rss) if rss else None,
        peak_cuda_bytes=max(cuda) if cuda else None,
    )
