"""The doctor's diagnosis: records in (one per rank), a :class:`DoctorResult` (summary + ranked findings) out.

:func:`diagnose_records` runs the doctor's rules on the primary record and, with several ranks, the
rank rules. The facade (:mod:`stave.doctor.facade`) calls it; nothing else composes the doctor's rules.
"""

from __future__ import annotations

import math
from typing import Sequence

from stave.analyze.breakdown import StepSummary, summarize_steps
from stave.analyze.gpu_util import gpu_util_window
from stave.analyze.step_model import compose, estimate
from stave.diagnose.engine import run_rules
from stave.diagnose.framework_fixes import apply_framework_fixes
from stave.diagnose.finding import MACHINE_IDS, Finding, rank_findings
from stave.diagnose.inputs import DoctorInput
from stave.dist.timing import rank_timings
from stave.doctor.result import DoctorResult, rank_summary
from stave.measure.record import RunRecord


def diagnose_records(records: Sequence[RunRecord], statuses: Sequence[str | None] | None = None) -> DoctorResult:
    """Summarize and diagnose one record (single process) or several (one per rank).

    The first record is the primary one (rank 0, or the only process); its findings are the
    report's; with several ranks the per-rank rules ("ranks" kind) run too.
    """
    if not records:
        raise ValueError("diagnose_records needs at least one record")
    ordered = sorted(records, key=lambda r: r.run.rank)
    primary = ordered[0]
    summary = summarize_steps(primary.steps)
    notes: list[str] = list(primary.notes)
    short = gpu_util_note(primary, summary)
    if short:
        notes.append(short)
    findings = run_rules("doctor", DoctorInput(primary, summary), notes)
    findings = apply_framework_fixes(findings, primary.config)
    statuses = list(statuses) if statuses is not None else [None] * len(ordered)
    ranks = [rank_summary(r, s) for r, s in zip(ordered, statuses)]
    if len(ordered) > 1:
        findings = rank_findings(
            findings + run_rules("ranks", rank_timings(ordered), notes) + run_rules("records", list(ordered), notes)
        )
    return DoctorResult(
        record=primary,
        summary=summary,
        findings=findings,
        ranks=ranks,
        rank_records=list(ordered),
        notes=notes,
        achievable_step_s=achievable_step_s(findings, summary.step_time_median_s),
    )


# NVML's readings come about every 0.1 s (the monitor's rate): a window needs a reading's worth more
# than the period for one reading to fall wholly inside it.
READING_INTERVAL_S = 0.1


def gpu_util_note(record: RunRecord, summary: StepSummary) -> str | None:
    """Why a GPU run has no utilization, and the run that would have one (None when it has one, or no
    GPU readings at all)."""
    window = gpu_util_window(record)
    if window is None or window.util_pct is not None:
        return None
    step_s = summary.step_time_median_s
    uncounted = len(record.steps) - len(record.counted_steps())
    needed = (math.ceil((window.period_s + 2 * READING_INTERVAL_S) / step_s) + uncounted) if step_s > 0 else None
    return (f"GPU utilization not measured: the counted steps took {window.window_s:.2f} s, and NVML's readings "
            f"describe the past {window.period_s:.2f} s each, so none falls inside them; NO_COMPILE, GPU_UNDERUSED "
            f"and SYNC_IN_LOOP's estimate need it"
            + (f" (--steps {needed} or more would measure it)" if needed else ""))


def achievable_step_s(findings: Sequence[Finding], measured_step_s: float) -> float | None:
    """The step time (per the measured step's samples) if every speed finding's fix were applied:
    the step model run once with all their input changes together (:func:`compose`), so fixes that
    overlap are not counted twice, the way multiplying their estimates would.

    Only the job's findings the model priced count (MACHINE_BUSY is about other processes); the
    largest estimate's inputs win where two fixes set the same one. ``None`` without any.
    """
    priced = sorted((f for f in findings if f.model_change is not None and f.id not in MACHINE_IDS
                     and f.est_speedup > 1.0), key=lambda f: f.est_speedup)
    if not priced or measured_step_s <= 0:
        return None
    base, _after, matched_s = priced[-1].model_change
    combined = compose(base, [(before, after) for before, after, _ in (f.model_change for f in priced)])
    gain = estimate(base, combined, matched_s)
    # At least the best single fix's gain: composing adds fixes to it, it cannot take that one away.
    gain = max(float(gain), priced[-1].est_speedup)
    return measured_step_s / gain

