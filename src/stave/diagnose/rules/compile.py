"""RECOMPILES: torch.compile compiles again and again during training.

Dynamo specializes a compiled frame on what its guards check (tensor shapes, dtypes, Python
values). A shape that changes from step to step (variable sequence lengths, a last batch of
another size, a Python int that changes) fails the guards and compiles a new graph; after a first
recompile dynamo marks the dimension dynamic, but ``dynamic=False``, a changing rank or dtype, or a
guarded Python value recompiles every time, until the recompile limit falls back to eager. Each
compile costs seconds on the main thread, inside the step that triggered it.
"""

from __future__ import annotations

import re
import statistics

from stave.analyze.step_inputs import step_inputs
from stave.analyze.step_model import estimate
from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.inputs import DoctorInput
from stave.diagnose.rules._helpers import REPORT_MIN_SPEEDUP, make_finding
from stave.measure.steps import StepRecord

# One frame compiled after warm-up is a recompile; two or more is a pattern, not a one-off (an
# epoch's last short batch compiles once and is then cached).
MIN_RECOMPILES = 2

_SIZE = re.compile(r"tensor '([^']+)' (size|rank|dtype|stride)[^.]*mismatch(?: at index (\d+))?")


# Dynamo's automatic dynamic shapes mark a dimension dynamic at its first size mismatch; when the
# same dimension fails the guards again and again, dynamic shapes did not hold for it (the
# compile has ``dynamic=False``, or an op, such as a CPU convolution, specializes on the size).
REPEATED_FAILURES = 3


def _failures_of(reasons: list[str], tensor: str, index: str) -> int:
    """How many recompile reasons name a size mismatch of ``tensor`` at dimension ``index``."""
    return sum(1 for text in reasons for m in _SIZE.finditer(text)
               if m.group(1) == tensor and m.group(2) == "size" and m.group(3) == index)


# The bucket the fix text pads a failing dimension up to (a multiple of it, as detection models'
# "size divisible by 32"); the estimate prices exactly that change.
BUCKET = 32
_SIZES = re.compile(r"tensor '([^']+)' size mismatch at index (\d+)\. expected (\d+), actual (\d+)")


def _buckets(reasons: list[str], tensor: str | None, index: str | None) -> int | None:
    """Buckets of :data:`BUCKET` spanning the sizes the guard failures show for ``tensor``'s
    dimension ``index`` (from the smallest to the largest: the kept reasons are only the first few,
    the range is what they do show), None when they show no sizes."""
    sizes = [int(n) for text in reasons for m in _SIZES.finditer(text)
             if m.group(1) == tensor and m.group(2) == index for n in (m.group(3), m.group(4))]
    if not sizes:
        return None
    return -(-max(sizes) // BUCKET) - (-(-min(sizes) // BUCKET)) + 1


def _changing(reasons: list[str]) -> tuple[str | None, str | None, str | None]:
    """(tensor, what changed, index) of the first guard failure that names a tensor."""
    for text in reasons:
        m = _SIZE.search(text)
        if m:
            return m.group(1), m.group(2), m.group(3)
    return None, None, None


# A median of the steps that compiled nothing needs a few of them.
MIN_STEADY_STEPS = 3


def compiling_steps_excess(steps: list[StepRecord]) -> tuple[int, float | None, float | None]:
    """(steps that compiled, seconds per sample of those that did not, seconds the compiling steps
    took beyond that rate for their samples), the last two None without enough steady steps.

    Dynamo's compile timer covers tracing and the backend, not all a compiling step pays: the
    first run of new kernels, the backward graph compiled at the first backward, guards built. On
    ``compile_batch_sizes`` the timer said 36 ms a compiling step where those steps took 50 ms
    beyond the others' rate. A step that compiled costs, once its shapes stop recompiling, what
    the run's other steps cost per sample (per step where samples are not known).
    """
    compiling = [s for s in steps if s.compiled_frames > 0]
    steady = [s for s in steps if s.compiled_frames == 0]
    if not compiling or len(steady) < MIN_STEADY_STEPS:
        return len(compiling), None, None
    if all(s.samples > 0 for s in steps):
        rate = statistics.median(s.duration_ns / 1e9 / s.samples for s in steady)
        excess = sum(max(0.0, s.duration_ns / 1e9 - rate * s.samples) for s in compiling)
        return len(compiling), rate, excess
    typical = statistics.median(s.duration_ns / 1e9 for s in steady)
    return len(compiling), None, sum(max(0.0, s.duration_ns / 1e9 - typical) for s in compiling)


@rule("RECOMPILES", kind="doctor")
def recompiles(inp: DoctorInput) -> Finding | None:
    """Frames were compiled again during the counted steps."""
    record, summary = inp.record, inp.summary
    cfg = record.config
    n = cfg.compile_frames_counted
    if n is None or n < MIN_RECOMPILES or summary.steps == 0:
        return None
    compile_s = cfg.compile_s_counted or 0.0
    model = step_inputs(record, summary)
    if model is None:
        return None
    # The compiles ran inside the steps' forward (where the compiled module is called): per step,
    # their mean share of the counted steps comes off that phase.
    compiling, steady_s_per_sample, steps_saved_s = compiling_steps_excess(record.counted_steps())
    tensor, what, index = _changing(cfg.recompile_reasons)
    failures = _failures_of(cfg.recompile_reasons, tensor, index) if tensor and what == "size" and index else 0
    repeated = failures >= REPEATED_FAILURES
    # dynamic=False holds every dimension static: without it (or with the dimension marked dynamic)
    # one graph serves all sizes, unless the model has convolutions, which specialize on the input
    # size when compiled for a CPU whatever the setting (compile_multiscale: dynamic=True compiled
    # the same seven graphs). Then the fix is buckets.
    static_only = repeated and cfg.compile_dynamic is False and not cfg.conv_model
    bucketing = repeated and not static_only
    # The bucketing fix still compiles each bucket once: of the frames compiled, as many as there
    # are buckets stay (the same share of them in the counted steps).
    buckets = _buckets(cfg.recompile_reasons, tensor, index) if bucketing else None
    kept = min(1.0, buckets / cfg.compile_frames) if buckets and cfg.compile_frames else 0.0
    per_step = max(compile_s, steps_saved_s or 0.0) * (1.0 - kept) / summary.steps
    phases = dict(model.phases_s)
    phases["forward"] = max(0.0, phases.get("forward", 0.0) - per_step)
    est = estimate(model, model.changed(phases_s=phases), summary.step_time_mean_s)
    if static_only:
        fix = (f"# dimension {index} of {tensor} failed the guards {failures} times: the model was compiled with\n"
               "# dynamic=False, which keeps every size static (one graph per size, then eager past the limit).\n"
               "model = torch.compile(model)  # without dynamic=False: the size is made dynamic at its first change\n"
               f"# or keep it and mark the dimension:  torch._dynamo.mark_dynamic(x, {index})  before the compiled call")
    elif repeated:
        fix = (f"# dimension {index} of {tensor} failed the guards {failures} times: dynamic shapes did not\n"
               "# hold for it (dynamic=False, or an op that specializes on the size, e.g. a CPU convolution).\n"
               f"# Pad or bucket dimension {index} to a few fixed sizes, each compiled once:\n"
               f"#   e.g. zero-pad up to the next multiple of 32:  pad = -x.shape[{index}] % 32\n"
               "# or, where the model allows it: torch.compile(model, dynamic=True) and check the recompiles stop\n"
               "#   (TORCH_LOGS=recompiles python train.py)")
    elif tensor and what == "size" and index is not None:
        fix = (f"torch._dynamo.mark_dynamic({tensor.split('[')[0]}, {index})  # before the compiled call: one graph for all sizes\n"
               f"# or pad/bucket dimension {index} to a few fixed sizes (e.g. multiples of 64), or drop_last=True\n"
               "# or torch.compile(model, dynamic=True)")
    else:
        fix = ("# find the changing guard:  TORCH_LOGS=recompiles python train.py\n"
               "# keep shapes, dtypes and Python values passed to the compiled call fixed (bucket/pad shapes,\n"
               "# torch._dynamo.mark_dynamic(x, dim) for a dimension that must vary)")
    severity = None if est >= REPORT_MIN_SPEEDUP else "info"
    changed = f" ({what} of {tensor}{'' if index is None else f' dim {index}'} changes)" if tensor else ""
    return make_finding(
        "RECOMPILES",
        est,
        f"torch.compile compiled {n} more frames after warm-up{changed}, {compile_s:.1f} s of compiling",
        {
            "frames_compiled_after_warmup": n,
            "frames_compiled_total": cfg.compile_frames,
            "compile_s_after_warmup": compile_s,
            "compile_s_per_step": compile_s / summary.steps,
            "compiling_steps": compiling,
            "steady_s_per_sample": steady_s_per_sample,
            "compiling_steps_excess_s": steps_saved_s,
            "saved_s_per_step": per_step,
            "buckets_after_fix": buckets,
            "compile_dynamic": cfg.compile_dynamic,
            "recompile_reasons": cfg.recompile_reasons,
            "changing_tensor": tensor,
            "changing_property": what,
            "changing_dim": index,
            "dynamic_did_not_hold": repeated,
            "model_inputs_changed": {"phases_s.forward": [model.phases_s.get("forward", 0.0), phases["forward"]]},
        },
        fix,
        explanation=(
            "Each guard failure compiles a new graph on the main thread, inside the step. Estimate: "
            "the step model with the compiling steps' excess over the other steps' time per sample (at "
            "least dynamo's compile time) taken off the forward phase."
        ),
        severity=severity,
    )
