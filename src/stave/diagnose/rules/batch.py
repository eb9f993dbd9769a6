"""BATCH_DTYPE and SMALL_BATCH: what the batch is made of, and whether it is big enough.

BATCH_DTYPE: float64 batches (numpy's default float type leaking into the loader) either drag the
model into float64 (``model.double()`` to make the types match) or double every byte loaded,
collated and copied; float32 images on a GPU cost four times the copy of uint8 ones.
SMALL_BATCH: a step has costs that do not grow with the batch (the optimizer update, the host's
per-op dispatch, per-batch loader overhead); when they are a large share of the step, a larger
batch spreads them over more samples. Never inferred from the batch size alone.
"""

from __future__ import annotations

import math

from stave.analyze.pipeline import main_loader, summarize_pipeline
from stave.analyze.step_inputs import PIN_COPY_BYTES_PER_S, step_inputs
from stave.analyze.step_model import StepInputs, estimate, phase_s
from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.inputs import DoctorInput
from stave.diagnose.rules._helpers import REPORT_MIN_SPEEDUP, dataloader_call, is_gpu, make_finding, saving_speedup

# fp64 math runs at most half the fp32 rate: a SIMD register holds half as many fp64 values, and
# GPUs have 1/2 (datacenter) down to 1/64 (consumer) of their fp32 rate. 2x is the least it costs.
FP64_SLOWDOWN = 2.0
# A float32 value is 4 bytes, a float64 one 8: every float byte the loader builds and ships halves.
FLOAT32_OVER_FLOAT64_BYTES = 0.5
# Loading stages that work on uint8 images or before the float conversion (decoding, PIL geometry
# and colour ops): their cost does not depend on the float dtype the batch ends in.
UINT8_STAGES = frozenset({"load", "Resize", "RandomResizedCrop", "CenterCrop", "RandomCrop", "RandomHorizontalFlip",
                          "ColorJitter", "GaussianBlur", "PILToTensor", "RandomRotation", "Pad"})
# A float32 pixel is 4 bytes, a uint8 pixel 1: the copy of an image batch shrinks 4x as uint8.
FLOAT32_TO_UINT8_BYTES = 4.0
# Image batches copied as float32 are only worth a finding when the copy is this share of the step.
H2D_MIN_SHARE = 0.05
# The batch growth the estimate assumes: the usual first step up, well inside the range where the
# linear learning-rate scaling rule is known to hold (Goyal et al. 2017 go to 32x).
SMALL_BATCH_GROWTH = 4
# A third of the step fixed: a 4x batch then buys at least 1.33x, enough to pay for retuning the
# learning rate (and the convergence risk) a 4x batch brings; below it the change is not worth that.
SMALL_BATCH_MIN_FIXED_SHARE = 1 / 3
# Forward and backward count as per-op overhead (fixed per step) when the counted FLOPs at the
# probe's matmul rate explain under a tenth of their time and the mean op costs at most ten bare
# dispatches (dispatch, autograd node, module call and the backward counterpart are a few): work
# that scales with the data would show as FLOPs or as ops far slower than a dispatch.
OP_BOUND_MAX_FLOP_SHARE = 0.10
OP_BOUND_MAX_DISPATCHES = 10.0
# On a GPU the batch can only grow into free memory; keep this share of it for fragmentation and
# the allocator's cache.
GPU_MEMORY_USABLE_SHARE = 0.9


def _dominant_param_dtype(param_dtypes: dict[str, int]) -> str | None:
    if not param_dtypes:
        return None
    return max(param_dtypes, key=lambda k: param_dtypes[k]).replace("torch.", "")


def _float_stage_share(inp: DoctorInput) -> float:
    """Share of the loading CPU in stages that handle the float batch (all but the uint8 ones)."""
    pipe = summarize_pipeline(inp.record)
    if pipe is None or pipe.cpu_s_per_sample <= 0:
        return 0.0
    total = sum(st.cpu_s_per_sample for st in pipe.stages)
    if total <= 0:
        return 0.0
    floats = sum(st.cpu_s_per_sample for st in pipe.stages
                 if st.name.split("#", 1)[0].split(".")[-1] not in UINT8_STAGES)
    return floats / total


def _float64_fix(inp: DoctorInput, model: StepInputs, f64_bytes: int, model_f64: bool) -> tuple[StepInputs, dict[str, float]]:
    """The model's inputs with the batch (and, where it followed, the model) in float32."""
    # Loading stages that move the float tensors halve with their bytes; decoding/uint8 stages stay.
    share = _float_stage_share(inp)
    load_cpu = model.load_cpu_s * (1.0 - share * (1.0 - FLOAT32_OVER_FLOAT64_BYTES))
    phases = dict(model.phases_s)
    speed: dict[str, float] = dict(model.phase_speed)
    cast_s = 0.0
    if model_f64:
        speed.update({p: FP64_SLOWDOWN for p in ("forward", "backward", "optimizer", "h2d")})
    else:
        # The step's cast reads 8 bytes and writes 4 per element: memory traffic at one core's bandwidth.
        cast_s = f64_bytes * (1.0 + FLOAT32_OVER_FLOAT64_BYTES) / PIN_COPY_BYTES_PER_S
        where = "other" if phases.get("other", 0.0) >= cast_s else "forward"
        phases[where] = max(0.0, phases.get(where, 0.0) - cast_s)
        speed["h2d"] = 1.0 / FLOAT32_OVER_FLOAT64_BYTES
    after = model.changed(load_cpu_s=load_cpu, phases_s=phases, phase_speed=speed)
    return after, {"float_stage_share_of_loading": share, "load_cpu_s_per_step": model.load_cpu_s,
                   "load_cpu_s_per_step_after": load_cpu, "cast_s_per_step": cast_s}


@rule("BATCH_DTYPE", kind="doctor")
def batch_dtype(inp: DoctorInput) -> Finding | None:
    """Batches arrive as float64 (or, on a GPU, images as float32 where uint8 would do)."""
    record, summary = inp.record, inp.summary
    if summary.steps == 0:
        return None
    cfg = record.config
    f64 = [t for t in cfg.batch if t.dtype.replace("torch.", "") == "float64"]
    model_dtype = _dominant_param_dtype(cfg.param_dtypes)
    model = step_inputs(record, summary)
    if f64 and model is not None:
        names = ", ".join(f"{t.path} {list(t.shape)}" for t in f64[:3])
        f64_bytes = sum(t.nbytes for t in f64)
        model_f64 = model_dtype == "float64"
        after, parts = _float64_fix(inp, model, f64_bytes, model_f64)
        est = estimate(model, after, summary.step_time_mean_s)
        evidence = {
            "float64_tensors": [t.path for t in f64],
            "float64_bytes_per_batch": f64_bytes,
            "model_param_dtype": model_dtype,
            "model_params": cfg.model_params,
            "num_workers": model.workers,
            **parts,
            "model_inputs_changed": {"load_cpu_s": [model.load_cpu_s, after.load_cpu_s],
                                     "phase_speed": after.phase_speed},
        }
        if model_f64:
            title = f"Batches are float64 ({names}) and the model computes in float64"
            explain = (
                "float64 runs at half the fp32 rate or worse, and every float byte is built, collated and "
                "shipped through shared memory twice over. Estimate: the step model with forward, "
                f"backward, optimizer and copy {FP64_SLOWDOWN:g}x faster and the loading stages that "
                "handle the float tensors at half their bytes."
            )
            fix = (
                "# in the Dataset: hand out float32 (numpy defaults to float64)\n"
                "x = torch.from_numpy(array.astype(np.float32))\n"
                "# and keep the model in float32: drop model.double()"
            )
        else:
            title = f"Batches are float64 ({names}) and are converted for a {model_dtype or 'non-float64'} model"
            explain = (
                "Every float byte is computed in float64 by the loader, collated, shipped through shared "
                "memory, then cast in the step. Estimate: the step model with the loading stages that "
                "handle the float tensors at half their bytes and the cast gone."
            )
            fix = ("x = torch.from_numpy(array.astype(np.float32))  # in the Dataset, instead of a cast in the loop\n"
                   "# better still for images: hand out uint8 (8x fewer bytes than float64) and normalize the batch")
        return make_finding("BATCH_DTYPE", est, title, evidence, fix, explanation=explain)
    if not is_gpu(record):
        return None
    images = [t for t in cfg.batch if t.dtype == "float32" and len(t.shape) == 4]
    share = summary.breakdown.get("h2d", 0.0)
    if not images or share < H2D_MIN_SHARE:
        return None
    est = saving_speedup(inp, {"h2d": phase_s(summary, "h2d") * (1.0 - 1.0 / FLOAT32_TO_UINT8_BYTES)},
                         summary.step_time_median_s)
    if est < REPORT_MIN_SPEEDUP:
        return None
    return make_finding(
        "BATCH_DTYPE",
        est,
        f"Image batches are copied to the GPU as float32 ({share:.0%} of the step); uint8 is 4x smaller",
        {"float32_image_tensors": [t.path for t in images], "h2d_share": share, "h2d_bytes_per_step": summary.h2d_bytes_per_step},
        "# keep images uint8 in the workers (PILToTensor, no Normalize) and normalize on the GPU:\n"
        "loader = stave.data.DeviceLoader(loader, device, mean=MEAN, std=STD, dtype=torch.float32)",
        explanation="Estimate: the copy time divided by 4 (bytes per pixel).",
    )


def _fixed_costs_s(inp: DoctorInput) -> tuple[float, dict[str, float]]:
    """Seconds per median step that do not grow with the batch, by source."""
    record, summary = inp.record, inp.summary
    cfg = record.config
    parts: dict[str, float] = {"optimizer_s": phase_s(summary, "optimizer")}
    overhead = record.probes.op_overhead_ns
    compute = phase_s(summary, "forward") + phase_s(summary, "backward")
    ops = None
    if cfg.aten_ops_by_phase:
        ops = cfg.aten_ops_by_phase.get("forward", 0) + cfg.aten_ops_by_phase.get("backward", 0)
    if overhead is not None and ops:
        # Each op pays a fixed dispatch cost whatever its size; it cannot exceed the phases it is in.
        parts["dispatch_s"] = min(compute, ops * overhead / 1e9)
        rate = record.probes.fp32_matmul_flops_per_s
        flops = cfg.flops_by_phase.get("forward", 0) + cfg.flops_by_phase.get("backward", 0)
        if rate and compute > 0:
            flop_s = flops / rate
            per_op_s = compute / ops
            if flop_s < OP_BOUND_MAX_FLOP_SHARE * compute and per_op_s <= OP_BOUND_MAX_DISPATCHES * overhead / 1e9:
                # Ops too small for their size to matter: beyond the bare dispatch, each pays its
                # autograd node and Python module call, none of which grows with the batch.
                parts["dispatch_s"] = max(parts["dispatch_s"], compute - flop_s)
    pipe = summarize_pipeline(record)
    if pipe is not None and pipe.in_main_process:
        # The part of the wait beyond the samples' own loading: sampler, fetch and collate overhead.
        wait = summary.phase_median_s.get("data_wait", 0.0)
        getitem = sum(s.wall_s_per_sample for s in pipe.stages if s.name != "collate")
        parts["loader_overhead_s"] = max(0.0, wait - getitem * summary.samples_per_step)
    return sum(parts.values()), parts


def _accumulation(record) -> int:
    """Backward passes per optimizer step (micro-batches), the median over the counted steps."""
    calls = sorted(s.backward_calls for s in record.counted_steps())
    return calls[len(calls) // 2] if calls else 1


def _growth_limit(inp: DoctorInput) -> int:
    """How many times the batch may grow: :data:`SMALL_BATCH_GROWTH`, or less where GPU memory ends."""
    record = inp.record
    total = record.config.device_total_memory_bytes
    peaks = [s.cuda_peak_bytes for s in record.host if s.cuda_peak_bytes is not None]
    if is_gpu(record) and total and peaks and max(peaks) > 0:
        # The whole peak (weights and optimizer state included) scaled: conservative on purpose.
        return max(1, min(SMALL_BATCH_GROWTH, math.floor(total * GPU_MEMORY_USABLE_SHARE / max(peaks))))
    return SMALL_BATCH_GROWTH


@rule("SMALL_BATCH", kind="doctor")
def small_batch(inp: DoctorInput) -> Finding | None:
    """A large share of the step is fixed per-step cost that a bigger batch would amortize."""
    record, summary = inp.record, inp.summary
    t = summary.step_time_median_s
    if summary.steps == 0 or t <= 0 or summary.samples_per_step <= 0:
        return None
    fixed_s, parts = _fixed_costs_s(inp)
    share = min(1.0, fixed_s / t)
    growth = _growth_limit(inp)
    accum = _accumulation(record)
    if accum >= 2:
        # Gradient accumulation: the fixed cost that matters is paid per micro-batch; merging
        # micro-batches keeps the effective batch (and the learning rate) as it is.
        growth = min(growth, accum)
    if share < SMALL_BATCH_MIN_FIXED_SHARE or growth < 2:
        return None
    model = step_inputs(record, summary)
    if model is None:
        return None
    loader_fixed = parts.get("loader_overhead_s", 0.0)
    before = model.changed(fixed_s=max(0.0, fixed_s - loader_fixed))
    if accum >= 2:
        # Same samples per step, fewer micro-batches: the per-micro-batch dispatch shrinks by `growth`.
        dispatch = parts.get("dispatch_s", 0.0)
        phases = dict(before.phases_s)
        fb = phases.get("forward", 0.0) + phases.get("backward", 0.0)
        for p in ("forward", "backward"):
            if fb > 0:
                phases[p] = phases.get(p, 0.0) - dispatch * (1 - 1 / growth) * phases.get(p, 0.0) / fb
        after = before.changed(phases_s=phases, load_extra_s=before.load_extra_s)
    else:
        # The loader's per-batch overhead stays per batch; everything else per sample grows with it.
        after = before.changed(batch_scale=float(growth), load_extra_s=before.load_extra_s / growth)
    est = estimate(before, after, summary.step_time_mean_s)
    if est < REPORT_MIN_SPEEDUP:
        return None
    batch = round(summary.samples_per_step)
    loader = main_loader(record)
    lines = []
    if accum >= 2:
        micro = batch // accum
        lines.append(f"# {accum} micro-batches of {micro} per optimizer step: use {accum // growth} of {micro * growth}")
        if loader is not None and loader.batch_size:
            lines.append(dataloader_call(loader, batch_size=loader.batch_size * growth))
        lines.append(f"accumulation_steps = {max(1, accum // growth)}  # same samples per optimizer step, same lr")
    else:
        if loader is not None and loader.batch_size:
            lines.append(dataloader_call(loader, batch_size=loader.batch_size * growth))
        else:
            lines.append(f"batch_size = {batch * growth}")
        lines.append(f"lr = base_lr * {growth}  # linear scaling rule; warm the rate up over the first epochs")
    slow_opt = [o for o in record.config.optimizers if not o.foreach and not o.fused and o.param_tensors > 1]
    if slow_opt:
        o = slow_opt[0]
        lines.append(
            f"# the optimizer updates {o.param_tensors} tensors one by one: "
            f"torch.optim.{o.type}(params, ..., foreach=True) batches them"
        )
    evidence = {
        "samples_per_step": summary.samples_per_step,
        "micro_batches_per_step": accum,
        "model_inputs_changed": ({"micro_batch": [batch // max(accum, 1), batch // max(accum, 1) * growth]}
                                 if accum >= 2 else {"batch_scale": [1, growth]}),
        "step_time_s": t,
        "fixed_s_per_step": fixed_s,
        "fixed_share": share,
        "batch_growth": growth,
        "aten_ops_per_step": record.config.aten_ops_per_step,
        "op_overhead_ns": record.probes.op_overhead_ns,
        **parts,
    }
    return make_finding(
        "SMALL_BATCH",
        est,
        f"{share:.0%} of each step is fixed cost that does not grow with the batch of {batch}",
        evidence,
        "\n".join(lines),
        explanation=(
            "The optimizer update, per-op dispatch and per-batch loader overhead cost the same for 1 "
            f"sample or {batch * growth}. Estimate: samples/s with a {growth}x batch, "
            "1 / (fixed_share / k + 1 - fixed_share)."
        ),
    )
