"""STEP_OUTLIERS: a few steps far slower than the rest, often on a rhythm (checkpoints, logging).

The stall's phase says what it is: ``other`` is code outside the model, loader and optimizer
(``torch.save``, a metrics flush, a validation pass). Waits for data are the input-pipeline
findings' (DATA_WORKER_STARTUP for epoch starts). The stack samples of the slow steps name the line.
"""

from __future__ import annotations

import math

from stave.analyze.hotlines import hot_lines
from stave.analyze.outliers import find_outliers
from stave.analyze.step_inputs import machine_load
from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.inputs import DoctorInput
from stave.diagnose.rules.machine import machine_is_busy
from stave.diagnose.rules._helpers import LINE_MIN_SHARE, REPORT_MIN_SPEEDUP, is_gpu, make_finding, saving_speedup

# One slow step is an accident; two or more are a pattern worth a finding.
OUTLIER_MIN_COUNT = 2
# Irregular stalls inside the model's own phases are what a machine shared with other busy
# processes produces (a preempted thread holds up the whole op): not reported without a rhythm.
MODEL_PHASES = ("forward", "backward", "optimizer")
# Where a stall cannot be moved off the critical path, it should cost at most this share of the
# run: checkpointing that takes 2% of the time is the usual price of being able to resume.
STALL_BUDGET_SHARE = 0.02

_BACKGROUND_SAVE = (
    "# Save in the background: copy the state off the training tensors (fast), write it in a\n"
    "# thread (slow), so the next steps run while the file is written.\n"
    "import threading\n"
    "def save_async(state, path):\n"
    "    snapshot = {k: v.detach().to('cpu', copy=True) for k, v in state.items()}\n"
    "    threading.Thread(target=torch.save, args=(snapshot, path), daemon=False).start()\n"
    "# (torch.distributed.checkpoint.async_save does the same for sharded state)"
)

_PHASE_FIX = {
    "other": _BACKGROUND_SAVE,
    "forward": (
        "# Slow forwards on a rhythm: shapes that change (recompilation with torch.compile, cuDNN\n"
        "# autotuning a new shape): pad to a few fixed shapes, or mark dims dynamic:\n"
        "torch._dynamo.mark_dynamic(x, 0)"
    ),
    "backward": "# Slow backwards on a rhythm: look for gradient hooks or collectives that run every N steps",
    "optimizer": "# Slow optimizer steps on a rhythm: an LR scheduler, EMA or gradient clipping that runs every N steps",
    "h2d": "# Slow copies on a rhythm: pin the batches (pin_memory=True) so copies do not page-fault",
}


def _fix(inp: DoctorInput, phase: str, period: int | None, stall_s: float, median_s: float) -> str:
    """The fix for a stall in ``phase``; for periodic work outside the model on a CPU-only run, a rhythm.

    On a CPU-only run the periodic work (serializing a checkpoint) needs the same cores as the
    training, so a background thread does not take it off the critical path: doing it less often
    does. On a GPU the host is free while the GPU computes, and the background save overlaps.
    """
    if phase != "other" or period is None or is_gpu(inp.record) or median_s <= 0:
        return _PHASE_FIX.get(phase, _BACKGROUND_SAVE)
    every = max(period + 1, math.ceil(stall_s / (STALL_BUDGET_SHARE * median_s)))
    return (
        f"# This work runs every {period} steps and costs {stall_s:.2f} s each time; on a CPU-only run it\n"
        "# needs the same cores as the training, so run it less often: every\n"
        f"# {every} steps keeps it under {STALL_BUDGET_SHARE:.0%} of the run.\n"
        f"if step % {every} == {every} - 1:\n"
        "    torch.save(state, path)\n"
        "# On a GPU, saving from a background thread (copy to CPU first) overlaps it with training."
    )


@rule("STEP_OUTLIERS", kind="doctor")
def step_outliers(inp: DoctorInput) -> Finding | None:
    """Some steps take a multiple of the median step; the stall is removed from the mean."""
    record, summary = inp.record, inp.summary
    out = find_outliers(record.steps)
    if len(out.indices) < OUTLIER_MIN_COUNT:
        return None
    phase = out.dominant_phase() or "other"
    # On a machine MACHINE_BUSY names, a preempted thread stalls whatever phase it is in: irregular
    # stalls anywhere are the machine's.
    if out.period_steps is None and (phase in MODEL_PHASES or machine_is_busy(machine_load(record, summary))):
        return None
    t = summary.step_time_mean_s
    est = saving_speedup(inp, {p: v / max(out.counted, 1) for p, v in out.excess_by_phase_s.items()}, t)
    if est < REPORT_MIN_SPEEDUP:
        return None
    lines = [h.label for h in hot_lines(record.stacks, out.indices, phase, limit=3) if h.share >= LINE_MIN_SHARE]
    rhythm = f" every {out.period_steps} steps" if out.period_steps else ""
    stall_s = out.excess_s / len(out.indices)
    return make_finding(
        "STEP_OUTLIERS",
        est,
        f"{len(out.indices)} of {out.counted} steps stall{rhythm} for {stall_s:.2f} s extra, in {phase}",
        {
            "outlier_steps": out.indices[:20],
            "outliers": len(out.indices),
            "steps_counted": out.counted,
            "period_steps": out.period_steps,
            "step_time_median_s": out.median_s,
            "step_time_mean_s": t,
            "stall_s_per_outlier": stall_s,
            "stall_s_per_step": out.excess_per_step_s,
            "stall_s_by_phase": out.excess_by_phase_s,
        },
        _fix(inp, phase, out.period_steps, stall_s, out.median_s),
        explanation=(
            "Estimate on the mean step time (the stalls are occasional): "
            "mean / (mean - the stalled phases' excess over their medians, spread over all steps)."
        ),
        lines=lines,
    )
