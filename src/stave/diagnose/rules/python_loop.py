"""PYTHON_OVERHEAD: the step spends its time in the user's Python, outside model, loader and optimizer.

``other`` is the part of the step no measured phase covers: a loss computed element by element in
a Python loop, metrics, logging. When it is a large share of the typical step, the stack samples
name the lines. Each tensor op issued from such a loop pays a fixed dispatch cost, and each
differentiable one adds an autograd node that backward replays one by one; whole-tensor ops pay
that once.
"""

from __future__ import annotations

from stave.analyze.hotlines import hot_lines
from stave.analyze.outliers import find_outliers
from stave.analyze.whatif import phase_s, speedup
from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.inputs import DoctorInput
from stave.diagnose.rules._helpers import LINE_MIN_SHARE, REPORT_MIN_SPEEDUP, counted_indices, make_finding

# The bound for an honest breakdown: below this share, ``other`` is the loop's own
# bookkeeping (iteration, a few scalar ops), not something to rewrite.
OTHER_MIN_SHARE = 0.15
# Fewer samples than this in ``other`` (0.2 s at 50 Hz) cannot say which line holds the time:
# a line's share would be off by more than 15% either way.
MIN_STACK_SAMPLES = 10


@rule("PYTHON_OVERHEAD", kind="doctor")
def python_overhead(inp: DoctorInput) -> Finding | None:
    """Much of the typical step is the user's Python outside the measured phases."""
    record, summary = inp.record, inp.summary
    t = summary.step_time_median_s
    if summary.steps == 0 or t <= 0:
        return None
    # Medians, so occasional stalls (checkpoints: STEP_OUTLIERS) do not make up a Python problem.
    other = min(summary.phase_median_s.get("other", 0.0), t)
    share = other / t
    if share < OTHER_MIN_SHARE:
        return None
    slow = set(find_outliers(record.steps).indices)
    steps = [i for i in counted_indices(record) if i not in slow]
    if record.stacks.sample_count(steps, "other") < MIN_STACK_SAMPLES:
        return None
    lines = [h for h in hot_lines(record.stacks, steps, "other", limit=3) if h.share >= LINE_MIN_SHARE]
    if not lines:
        return None
    hot_share = min(1.0, sum(h.share for h in lines))
    saved = other * hot_share
    evidence: dict[str, object] = {
        "step_time_s": t,
        "other_s": other,
        "other_share": share,
        "hot_lines": {h.label: h.share for h in lines},
        "hot_lines_share_of_other": hot_share,
        "aten_ops_in_other": record.config.aten_ops_by_phase.get("other"),
        "op_overhead_ns": record.probes.op_overhead_ns,
    }
    ops = record.config.aten_ops_by_phase.get("other")
    overhead = record.probes.op_overhead_ns
    if ops and overhead:
        # Backward runs one autograd node per differentiable op the loop issued, each paying about
        # one dispatch; bounded by the backward phase itself.
        replay = min(phase_s(summary, "backward"), ops * overhead / 1e9 * hot_share)
        saved += replay
        evidence["backward_replay_s"] = replay
    est = speedup(t, t - saved)
    if est < REPORT_MIN_SPEEDUP:
        return None
    top = lines[0]
    return make_finding(
        "PYTHON_OVERHEAD",
        est,
        f"{share:.0%} of the step is Python outside the model; {top.share:.0%} of it at {top.label} ({top.function})",
        evidence,
        f"""# {top.label}: replace the per-element Python loop with whole-tensor ops, e.g.
#   for i in range(len(y)): loss = loss + F.cross_entropy(out[i:i+1], y[i:i+1])
# becomes
loss = F.cross_entropy(out, y, reduction="sum")
# (or wrap the function in torch.compile when it cannot be written with batched ops)""",
        explanation=(
            "Estimate: the median 'other' time at the hot lines removed, plus the backward replay of "
            "the autograd nodes those lines recorded (ops x measured per-op overhead)."
        ),
        lines=[h.label for h in lines],
    )
