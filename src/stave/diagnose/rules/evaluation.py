"""EVAL_OVERHEAD: evaluation between optimizer steps takes a large share of the run's wall time.

Evaluation forwards (no gradients, or the model in ``eval()`` mode) and the batch fetches that feed
them are timed apart from the training step (``StepRecord.eval_ns``). Evaluating too often, on the
whole validation set, or in fp32 without ``inference_mode`` can cost as much as training itself.
The estimate is for the run's wall time, not the step. The fix names an evaluation interval: the
measured one stretched until evaluation is a share of the wall time whose removal would gain less
than :data:`REPORT_MIN_SPEEDUP` (evaluating even less often could not be confirmed), rounded up to a
round number a person would write; the estimate prices exactly that interval. The first
evaluation's one-time costs are not a cost of the interval: with two or more evaluations in the
window, each is priced as the later ones (:func:`steady_eval_share`).
"""

from __future__ import annotations

import math

from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.inputs import DoctorInput
from stave.diagnose.rules._helpers import REPORT_MIN_SPEEDUP, make_finding
from stave.measure.steps import StepRecord

# A fifth of the wall time: evaluation then delays the run by a quarter or more; below it, the
# usual "evaluate every epoch" cost that buys the validation curve.
MIN_EVAL_SHARE = 0.20
# The evaluation share the fix aims at: with evaluation at this share of the wall time, removing it
# altogether would gain 1 / (1 - share) = REPORT_MIN_SPEEDUP, which a user could not confirm.
EVAL_TARGET_SHARE = 1.0 - 1.0 / REPORT_MIN_SPEEDUP
# Intervals are named from the 1-2-5 series (100, 200, 500, 1000, ...): the numbers people configure.
NICE_STEPS = (1, 2, 5)


def eval_wall_speedup(eval_share: float, reduction: float) -> float:
    """Wall-time speedup when evaluation takes ``1/reduction`` of its time: 1 / (1 - share x (1 - 1/r))."""
    share = min(max(eval_share, 0.0), 1.0)
    left = 1.0 - share * (1.0 - 1.0 / max(reduction, 1.0))
    return 1.0 / left if left > 0 else 1.0


def nice_at_least(value: float) -> int:
    """The smallest number of the 1-2-5 series (1, 2, 5, 10, 20, ...) that is >= ``value``."""
    if value <= 1:
        return 1
    decade = 10 ** math.floor(math.log10(value))
    for base in (*NICE_STEPS, 10):
        if base * decade >= value - 1e-9:
            return int(base * decade)
    return int(10 * decade)


def target_interval(eval_share: float, interval_steps: float) -> int:
    """Steps between evaluations at which evaluation is at most :data:`EVAL_TARGET_SHARE` of the wall.

    With training ``1 - s`` and evaluation ``s`` of the wall, evaluating ``r`` times less often gives
    the share ``(s / r) / (1 - s + s / r)``; it equals the target at ``r = s (1 - t) / (t (1 - s))``.
    """
    s = min(max(eval_share, 0.0), 1.0 - 1e-9)
    t = EVAL_TARGET_SHARE
    r = max(1.0, s * (1.0 - t) / (t * (1.0 - s)))
    return nice_at_least(interval_steps * r)


def steady_eval_share(steps: list[StepRecord]) -> float:
    """Evaluation's share of the wall time over ``steps``, each evaluation priced as a later one.

    The first evaluation a run meets pays one-time costs: kernels for the evaluation batch's new
    shapes, the validation loader's first iterator (and, under the doctor, its first look at that
    loader): 195 ms against 14 ms for the second in a planted loop whose plain evaluations took
    8-13 ms each. With two or more in the window, each is priced at the mean of those after the
    first; with one, it stands as measured (there is no other to tell the two apart).
    """
    evals = [s.eval_ns for s in steps if s.eval_ns > 0]
    train_ns = sum(s.duration_ns for s in steps)
    if not evals:
        return 0.0
    per_eval = sum(evals[1:]) / (len(evals) - 1) if len(evals) >= 2 else float(evals[0])
    eval_ns = per_eval * len(evals)
    return eval_ns / (train_ns + eval_ns) if train_ns + eval_ns > 0 else 0.0


@rule("EVAL_OVERHEAD", kind="doctor")
def eval_overhead(inp: DoctorInput) -> Finding | None:
    """Evaluation runs between training steps take a large share of the wall time."""
    summary = inp.summary
    steps = inp.record.counted_steps()
    with_eval = [s for s in steps if s.eval_ns > 0]
    share = steady_eval_share(steps)
    if summary.steps == 0 or share < MIN_EVAL_SHARE:
        return None
    # Steps between evaluations now (the counted steps over those followed by one).
    interval = len(steps) / max(len(with_eval), 1)
    every = target_interval(share, interval)
    est = eval_wall_speedup(share, every / interval)
    if est < REPORT_MIN_SPEEDUP:
        return None
    return make_finding(
        "EVAL_OVERHEAD",
        est,
        f"evaluation takes {share:.0%} of the wall time ({len(with_eval)} of {len(steps)} steps are "
        f"followed by one, {sum(s.eval_forwards for s in with_eval)} evaluation forwards)",
        {
            "eval_share_of_wall": share,
            "eval_share_of_wall_measured": summary.eval_share,
            "eval_s_per_step": summary.eval_mean_s,
            "steps_with_eval": len(with_eval),
            "counted_steps": len(steps),
            "eval_forwards": sum(s.eval_forwards for s in with_eval),
            "eval_interval_steps": interval,
            "eval_interval_steps_after": every,
            "eval_target_share": EVAL_TARGET_SHARE,
        },
        f"""# Evaluate every {every} steps instead of every {interval:.3g}
# (or on a subset {every / interval:.3g}x smaller), without autograd:
if step % {every} == 0:
    model.eval()
    with torch.inference_mode():
        evaluate(model, val_subset)
    model.train()""",
        explanation=(
            f"Estimate (wall time, not the step): evaluating every {every} steps instead of every "
            f"{interval:.3g}, where evaluation is at most {EVAL_TARGET_SHARE:.1%} of the wall time "
            "(removing it altogether would then gain under "
            f"{REPORT_MIN_SPEEDUP:.2f}x): 1 / (1 - share x (1 - 1/r)), r = {every / interval:.3g}."
        ),
    )
