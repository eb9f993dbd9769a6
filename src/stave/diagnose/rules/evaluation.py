"""EVAL_OVERHEAD: evaluation between optimizer steps takes a large share of the run's wall time.

Evaluation forwards (no gradients, or the model in ``eval()`` mode) and the batch fetches that feed
them are timed apart from the training step (``StepRecord.eval_ns``). Evaluating too often, on the
whole validation set, or in fp32 without ``inference_mode`` can cost as much as training itself.
The estimate is for the run's wall time, not the step: evaluating half as often.
"""

from __future__ import annotations

from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.inputs import DoctorInput
from stave.diagnose.rules._helpers import REPORT_MIN_SPEEDUP, make_finding

# A fifth of the wall time: evaluation then delays the run by a quarter or more; below it, the
# usual "evaluate every epoch" cost that buys the validation curve.
MIN_EVAL_SHARE = 0.20
# The change the estimate assumes: evaluate half as often (or on half the validation set).
EVAL_REDUCTION = 2.0


def eval_wall_speedup(eval_share: float, reduction: float = EVAL_REDUCTION) -> float:
    """Wall-time speedup when evaluation takes ``1/reduction`` of its time: 1 / (1 - share x (1 - 1/r))."""
    share = min(max(eval_share, 0.0), 1.0)
    left = 1.0 - share * (1.0 - 1.0 / max(reduction, 1.0))
    return 1.0 / left if left > 0 else 1.0


@rule("EVAL_OVERHEAD", kind="doctor")
def eval_overhead(inp: DoctorInput) -> Finding | None:
    """Evaluation runs between training steps take a large share of the wall time."""
    summary = inp.summary
    share = summary.eval_share
    if summary.steps == 0 or share < MIN_EVAL_SHARE:
        return None
    est = eval_wall_speedup(share)
    if est < REPORT_MIN_SPEEDUP:
        return None
    steps = inp.record.counted_steps()
    with_eval = [s for s in steps if s.eval_ns > 0]
    return make_finding(
        "EVAL_OVERHEAD",
        est,
        f"evaluation takes {share:.0%} of the wall time ({len(with_eval)} of {len(steps)} steps are "
        f"followed by one, {sum(s.eval_forwards for s in with_eval)} evaluation forwards)",
        {
            "eval_share_of_wall": share,
            "eval_s_per_step": summary.eval_mean_s,
            "steps_with_eval": len(with_eval),
            "counted_steps": len(steps),
            "eval_forwards": sum(s.eval_forwards for s in with_eval),
        },
        """# Evaluate less often, or on a fixed subset of the validation set, and without autograd:
if step % eval_every == 0:           # e.g. every 1000 steps, not every 100
    model.eval()
    with torch.inference_mode():
        evaluate(model, val_subset)
    model.train()""",
        explanation=(
            "Estimate (wall time, not the step): evaluation halved, by evaluating half as often or on "
            "half of the validation set: 1 / (1 - share / 2)."
        ),
    )
