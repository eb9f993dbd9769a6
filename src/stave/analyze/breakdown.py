"""The additive step-time breakdown and the run summary the reports and rules share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from stave.analyze.stats import median, percentile
from stave.measure.steps import PHASES, StepRecord, step_time_s


@dataclass
class StepSummary:
    """Statistics over the counted steps of one process.

    ``breakdown`` is each phase's share of the total step time (time-weighted: sum of the phase
    over the counted steps divided by the sum of their durations), so the shares add up to 1.
    ``phase_median_s`` is each phase's median per step, in seconds.
    """

    steps: int = 0
    total_steps: int = 0
    step_time_median_s: float = 0.0
    step_time_p90_s: float = 0.0
    step_time_mean_s: float = 0.0
    step_time_min_s: float = 0.0
    step_time_max_s: float = 0.0
    samples_per_step: float = 0.0
    samples_per_s: float = 0.0
    breakdown: dict[str, float] = field(default_factory=dict)
    phase_median_s: dict[str, float] = field(default_factory=dict)
    phase_mean_s: dict[str, float] = field(default_factory=dict)
    h2d_bytes_per_step: float = 0.0
    comm_wait_mean_s: float = 0.0
    # Token counts of the model's training inputs (0 when no token input was seen); per step and
    # per second of training time, padding included (tokens) and left out (real_tokens).
    tokens_per_step: float = 0.0
    real_tokens_per_step: float = 0.0
    tokens_per_s: float = 0.0
    real_tokens_per_s: float = 0.0
    # Evaluation between optimizer steps: its seconds per counted step and its share of their wall
    # time (training plus evaluation).
    eval_mean_s: float = 0.0
    eval_share: float = 0.0

    def phase_s(self, phase: str) -> float:
        """Mean seconds per step spent in ``phase`` (mean, so phases add up to the mean step)."""
        return self.phase_mean_s.get(phase, 0.0)


def summarize_steps(steps: Sequence[StepRecord]) -> StepSummary:
    """Summarize the counted steps (warm-up, profiled and FLOP-counted steps are left out)."""
    counted = [s for s in steps if s.counted]
    out = StepSummary(steps=len(counted), total_steps=len(steps))
    if not counted:
        out.breakdown = {p: 0.0 for p in PHASES}
        return out
    durations = [s.duration_ns / 1e9 for s in counted]
    total_s = sum(durations)
    out.step_time_median_s = step_time_s(durations)
    out.step_time_p90_s = percentile(durations, 90)
    out.step_time_mean_s = total_s / len(counted)
    out.step_time_min_s = min(durations)
    out.step_time_max_s = max(durations)
    samples = [s.samples for s in counted]
    out.samples_per_step = sum(samples) / len(counted)
    out.samples_per_s = sum(samples) / total_s if total_s > 0 else 0.0
    for phase in PHASES:
        values = [s.phase_ns(phase) / 1e9 for s in counted]
        out.phase_median_s[phase] = median(values)
        out.phase_mean_s[phase] = sum(values) / len(values)
        out.breakdown[phase] = sum(values) / total_s if total_s > 0 else 0.0
    out.h2d_bytes_per_step = sum(s.h2d_bytes for s in counted) / len(counted)
    out.comm_wait_mean_s = sum(s.comm_wait_ns for s in counted) / 1e9 / len(counted)
    tokens = sum(s.tokens for s in counted)
    real = sum(s.real_tokens for s in counted)
    out.tokens_per_step = tokens / len(counted)
    out.real_tokens_per_step = real / len(counted)
    out.tokens_per_s = tokens / total_s if total_s > 0 else 0.0
    out.real_tokens_per_s = real / total_s if total_s > 0 else 0.0
    eval_s = sum(s.eval_ns for s in counted) / 1e9
    wall_s = sum(s.wall_ns for s in counted) / 1e9
    out.eval_mean_s = eval_s / len(counted)
    out.eval_share = eval_s / wall_s if wall_s > 0 else 0.0
    return out
