"""BATCH_DTYPE and SMALL_BATCH: what the batch is made of, and whether it is big enough.

BATCH_DTYPE: float64 batches (numpy's default float type leaking into the loader) either drag the
model into float64 (``model.double()`` to make the types match) or double every byte loaded,
collated and copied; float32 images on a GPU cost four times the copy of uint8 ones.
SMALL_BATCH: a step has costs that do not grow with the batch (the optimizer update, the host's
per-op dispatch, per-batch loader overhead); when they are a large share of the step, a larger
batch spreads them over more samples. Never inferred from the batch size alone.
"""

from __future__ import annotations

import dataclasses
import math

from stave.analyze.breakdown import summarize_steps
from stave.analyze.outliers import find_outliers
from stave.analyze.pipeline import main_loader, summarize_pipeline
from stave.analyze.step_inputs import OP_BOUND_MAX_DISPATCHES, PIN_COPY_BYTES_PER_S, step_inputs
from stave.analyze.step_model import StepInputs, estimate, phase_s, step_time
from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.inputs import DoctorInput
from stave.diagnose.rules._helpers import (REPORT_MIN_SPEEDUP, at_free_cores, dataloader_call, is_gpu, loop_over_batch,
                                           make_finding, micro_batches, saving_speedup)

# fp64 math runs at most half the fp32 rate: a SIMD register holds half as many fp64 values, and
# GPUs have 1/2 (datacenter) down to 1/64 (consumer) of their fp32 rate. 2x is the least it costs.
FP64_SLOWDOWN = 2.0
# A float32 value is 4 bytes, a float64 one 8: every float byte the loader builds and ships halves.
FLOAT32_OVER_FLOAT64_BYTES = 0.5
# Shipped as uint8, an image's pixel is 1 byte instead of float64's 8.
UINT8_OVER_FLOAT64_BYTES = 1 / 8
# The step's float64 -> float32 cast reads 8 bytes and writes 4 per element.
CAST_F64_BYTES_PER_ELEMENT = 12.0
# Normalizing a uint8 batch in the step, (x.float() / 255 - mean) / std unfused: the cast reads 1 and
# writes 4 bytes, each of the three elementwise ops reads and writes 4: 29 bytes per element.
NORMALIZE_U8_BYTES_PER_ELEMENT = 29.0
# An elementwise op in the step streams at memory speed on all of torch's threads: one DDR4-3200
# channel moves 25.6 GB/s and servers have several, so 20 GB/s is a floor (a 21 MB float64 -> float32
# cast took 0.23 ms on a 2-core Zen 4 VM, its caches helping). The pinned copy of a whole batch is
# one thread's memcpy and keeps PIN_COPY_BYTES_PER_S.
STEP_ELEMENTWISE_BYTES_PER_S = 20e9
# Images have 1 (grey), 3 (RGB) or 4 (RGBA) channels.
IMAGE_CHANNELS = (1, 3, 4)
# Loading stages that work on uint8 images or before the float conversion (decoding, PIL geometry
# and colour ops): their cost does not depend on the float dtype the batch ends in.
UINT8_STAGES = frozenset({"load", "Resize", "RandomResizedCrop", "CenterCrop", "RandomCrop", "RandomHorizontalFlip",
                          "ColorJitter", "GaussianBlur", "PILToTensor", "RandomRotation", "Pad"})
# A float32 pixel is 4 bytes, a uint8 pixel 1: the copy of an image batch shrinks 4x as uint8.
FLOAT32_TO_UINT8_BYTES = 4.0
# Image batches copied as float32 are only worth a finding when the copy is this share of the step.
H2D_MIN_SHARE = 0.05
# A third of the step fixed: a 4x batch then buys at least 1.33x, enough to pay for retuning the
# learning rate (and the convergence risk) a larger batch brings; below it the change is not worth that.
SMALL_BATCH_MIN_FIXED_SHARE = 1 / 3
# Linear learning-rate scaling with warm-up is known to hold up to this batch (Goyal et al. 2017,
# ImageNet at 8k); beyond it other changes (LARS, LAMB) are needed, so the fix never names more.
LARGE_BATCH_MAX = 8192
# The same work validated the rule over a 32x range of batches (256 to 8192), and one measured batch
# size supports the step model's linear extrapolation no further: per-sample costs it cannot show
# (cache misses of larger activations) grow with the batch, and fixed costs inflated by other load
# would otherwise promise absurd gains. A finding asks for at most this growth; the next run of the
# doctor measures the new batch.
SMALL_BATCH_MAX_GROWTH = 32
# One core of any CPU does at least this many fp32 FLOP/s in a matmul (scalar code at 1 GHz, one
# fused multiply-add a cycle). Without the probe's rate the op-bound test uses it: the FLOPs' time is
# then overstated, which can only make the test stricter.
MIN_FLOPS_PER_S = 2e9
# default_collate's per-sample work beyond copying the bytes: one zip entry and one stacked element
# per field, about a microsecond; the rest of a collate call (walking the structure, allocating each
# batch tensor) is paid once per batch, whatever its size.
COLLATE_S_PER_SAMPLE = 1e-6
# Forward and backward count as per-op overhead (fixed per step) when the counted FLOPs at the
# probe's matmul rate explain under a tenth of their time and the mean op costs at most
# OP_BOUND_MAX_DISPATCHES bare dispatches (analyze/step_inputs.py): work that scales with the data
# would show as FLOPs or as ops far slower than a dispatch.
OP_BOUND_MAX_FLOP_SHARE = 0.10
# The GEMMs' fixed share speaks for the rest of forward and backward when the mean op beyond the
# GEMMs costs no more than this many times the mean GEMM call. At sizes where both are per-call cost
# they are the same quantity give or take an autograd node or a module call, and two means of it
# scatter between runs (tiny_batch: the ratio read 0.62, 0.66 and 0.83 in three runs on a Zen 3,
# grad_accum_micro 1.54), so "no more than 1x" decided such runs by noise. Ops that do work the FLOP
# counter does not see are an order of magnitude heavier (an LSTM's fused kernel: 0.6 ms an op
# beside GEMM calls of microseconds).
REST_OVER_GEMM_CALL_MAX = 2.0
# On a GPU the batch can only grow into free memory; keep this share of it for fragmentation and
# the allocator's cache.
GPU_MEMORY_USABLE_SHARE = 0.9


def _dominant_param_dtype(param_dtypes: dict[str, int]) -> str | None:
    if not param_dtypes:
        return None
    return max(param_dtypes, key=lambda k: param_dtypes[k]).replace("torch.", "")


def _float_stage_share(inp: DoctorInput) -> float:
    """Share of the loading CPU in stages that handle the float batch: all but the uint8 ones; and
    where ``load`` is the only per-sample stage (a ``__getitem__`` with no transforms), ``load``
    too, since it then does the float math itself. (The stages come sorted by cost, not in pipeline
    order, so "the last stage" cannot be read from them.)"""
    pipe = summarize_pipeline(inp.record)
    if pipe is None or pipe.cpu_s_per_sample <= 0:
        return 0.0
    total = sum(st.cpu_s_per_sample for st in pipe.stages)
    if total <= 0:
        return 0.0
    per_sample = [st.name for st in pipe.stages if st.name != "collate"]
    only = per_sample[0] if len(per_sample) == 1 else None
    floats = sum(st.cpu_s_per_sample for st in pipe.stages
                 if st.name == only or st.name.split("#", 1)[0].split(".")[-1] not in UINT8_STAGES)
    return floats / total


def _is_image_batch(shape: list[int]) -> bool:
    """A batch of images: N x C x H x W with 1, 3 or 4 channels (their pixels start as uint8)."""
    return len(shape) == 4 and shape[1] in IMAGE_CHANNELS


def _float64_fix(inp: DoctorInput, model: StepInputs, f64_bytes: int, model_f64: bool,
                 images: bool) -> tuple[StepInputs, dict[str, float]]:
    """The model's inputs with the batch (and, where it followed, the model) in float32, or, for
    ``images`` going to a float32 model, shipped as uint8 and normalized in the step."""
    # Loading stages that move the float tensors shrink with their bytes; decoding/uint8 stages stay.
    share = _float_stage_share(inp)
    bytes_after = UINT8_OVER_FLOAT64_BYTES if images and not model_f64 else FLOAT32_OVER_FLOAT64_BYTES
    load_cpu = model.load_cpu_s * (1.0 - share * (1.0 - bytes_after))
    phases = dict(model.phases_s)
    speed: dict[str, float] = dict(model.phase_speed)
    cast_s = normalize_s = 0.0
    if model_f64:
        speed.update({p: FP64_SLOWDOWN for p in ("forward", "backward", "optimizer", "h2d")})
    else:
        # Memory traffic of the step's elementwise work on the batch.
        elements = f64_bytes / 8
        cast_s = elements * CAST_F64_BYTES_PER_ELEMENT / STEP_ELEMENTWISE_BYTES_PER_S
        if images:
            # The uint8 batch is normalized in the step instead: a cast and two elementwise ops.
            normalize_s = elements * NORMALIZE_U8_BYTES_PER_ELEMENT / STEP_ELEMENTWISE_BYTES_PER_S
        where = "other" if phases.get("other", 0.0) >= cast_s else "forward"
        phases[where] = max(0.0, phases.get(where, 0.0) - cast_s + normalize_s)
        speed["h2d"] = 1.0 / bytes_after
    touch_saved = _touch_saved_s(inp, model, f64_bytes, bytes_after)
    if touch_saved > 0:
        # The first read of the batch in the step maps the worker's pages: fewer bytes, fewer pages.
        where = max(("other", "forward"), key=lambda p: phases.get(p, 0.0))
        phases[where] = max(0.0, phases.get(where, 0.0) - touch_saved)
    after = model.changed(load_cpu_s=load_cpu, phases_s=phases, phase_speed=speed)
    return after, {"float_stage_share_of_loading": share, "load_cpu_s_per_step": model.load_cpu_s,
                   "load_cpu_s_per_step_after": load_cpu, "cast_s_per_step": cast_s,
                   "normalize_s_per_step_after": normalize_s, "first_touch_saved_s_per_step": touch_saved}


def _touch_saved_s(inp: DoctorInput, model: StepInputs, f64_bytes: int, bytes_after: float) -> float:
    """Seconds a step saves on the first touch of the float64 tensors' shared-memory pages, which
    a batch from workers pays in the trainer (the delivery probe's ``touch_s``, for the whole batch);
    0 for main-process loading (no shared memory) or without the probe."""
    touch = inp.record.probes.delivery_touch_s
    batch_bytes = sum(t.nbytes for t in inp.record.config.batch)
    if not touch or model.workers <= 0 or batch_bytes <= 0 or not inp.record.config.batch[0].shape:
        return 0.0
    batches = inp.summary.samples_per_step / max(1, inp.record.config.batch[0].shape[0])
    return touch * batches * min(1.0, f64_bytes / batch_bytes) * (1.0 - bytes_after)


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
        images = not model_f64 and all(_is_image_batch(list(t.shape)) for t in f64)
        after, parts = _float64_fix(inp, model, f64_bytes, model_f64, images)
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
        elif images:
            title = f"Image batches are float64 ({names}): built, collated and shipped at 8x the bytes of uint8"
            explain = (
                "The loader normalizes the pixels in float64, collates and ships 8 bytes per pixel through "
                "shared memory, and the step casts them again. Estimate: the step model with the loading "
                "stages that handle the float tensors at 1/8 of their bytes (uint8), the cast gone, and a "
                "float32 normalize of the uint8 batch added to the step."
            )
            fix = ("# in the Dataset: hand out the uint8 image (torch.from_numpy(img), or PILToTensor())\n"
                   "# and normalize the whole batch in the step, in float32:\n"
                   "x = (x.float() / 255.0 - mean) / std  # mean, std: float32 tensors of shape (1, C, 1, 1)")
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


def _op_bound(inp: DoctorInput, compute_s: float, ops: int, overhead_ns: float) -> float | None:
    """Seconds of forward+backward that are per-op overhead when the ops are too small for their size
    to matter (all but the FLOPs' time: the mean op beyond them costs at most
    :data:`OP_BOUND_MAX_DISPATCHES` dispatches); ``None`` when the FLOPs or the op cost say the data
    does work."""
    cfg = inp.record.config
    rate = inp.record.probes.matmul_flops_per_s or inp.record.probes.fp32_matmul_flops_per_s or MIN_FLOPS_PER_S
    flops = cfg.flops_by_phase.get("forward", 0) + cfg.flops_by_phase.get("backward", 0)
    flop_s = flops / rate
    if compute_s <= 0 or ops <= 0:
        return None
    # Beside busy processes each step's phases come capped at exactly this many dispatches an op
    # (steps_at_free_cores): their means are within it, while a median step longer than the mean
    # scales the median-step phases past it; and a rounding error must not undo that either.
    limit_s = OP_BOUND_MAX_DISPATCHES * overhead_ns / 1e9 * (1 + 1e-9)
    mean_s = inp.summary.phase_s("forward") + inp.summary.phase_s("backward")
    per_op_s = (min(compute_s, mean_s) - flop_s) / ops
    if flop_s < OP_BOUND_MAX_FLOP_SHARE * compute_s and per_op_s <= limit_s:
        return compute_s - flop_s
    return None


def _fixed_costs_s(inp: DoctorInput) -> tuple[float, dict[str, float]]:
    """Seconds per median step that do not grow with the batch, by source.

    With gradient accumulation all but the optimizer are paid per micro-batch (summed over them).
    """
    record, summary = inp.record, inp.summary
    cfg = record.config
    parts: dict[str, float] = {"optimizer_s": phase_s(summary, "optimizer")}
    overhead = record.probes.op_overhead_ns
    compute = phase_s(summary, "forward") + phase_s(summary, "backward")
    ops = None
    by_phase = cfg.aten_ops_by_phase or {}
    if by_phase:
        ops = by_phase.get("forward", 0) + by_phase.get("backward", 0)
    # Ops whose count grows with the batch (a per-element loop in the loss) are per-sample cost
    # however small each is: only the model's own ops, and their share of backward's nodes, are fixed.
    fixed_op_share = _fixed_op_share(inp)
    if overhead is not None and ops:
        # Each op pays a fixed dispatch cost whatever its size; it cannot exceed the phases it is in.
        parts["dispatch_s"] = min(compute, ops * fixed_op_share * overhead / 1e9)
        op_bound = _op_bound(inp, compute, ops, overhead)
        if op_bound is not None:
            # Ops too small for their size to matter: beyond the bare dispatch, each pays its
            # autograd node and Python module call, none of which grows with the batch. What is
            # left, the FLOPs' time at the rate probe's rate, is the step's own products timed at
            # the step's own shapes: at such sizes mostly per-call cost too, and the batch-scaling
            # probe measured which share (tiny_batch.py, batch 2: 92 %; counted as per-sample, the
            # rest of those products' time made batch 64 cost 4x what it measured).
            flop_s = compute - op_bound
            flop_fixed = flop_s * (_probed_gemm_share(inp) or 0.0)
            parts["dispatch_s"] = max(parts["dispatch_s"], (op_bound + flop_fixed) * fixed_op_share)
            if not cfg.flops_by_phase.get("other", 0) and fixed_op_share == 1.0:
                # The loss and bookkeeping between the phases work on the outputs of a model whose own
                # ops were just shown to be per-op overhead: no larger tensors, so no more work per sample.
                parts["other_s"] = phase_s(summary, "other")
        gemm_share = _gemm_fixed_share(inp, compute)
        if gemm_share is not None:
            parts["dispatch_s"] = max(parts["dispatch_s"], gemm_share * compute * fixed_op_share)
            if not cfg.flops_by_phase.get("other", 0) and fixed_op_share == 1.0:
                # The loss between the phases is FLOP-free work on the model's outputs: at least as
                # fixed as the GEMMs that made them (the reason _gemm_fixed_share gives).
                parts["other_s"] = max(parts.get("other_s", 0.0), gemm_share * phase_s(summary, "other"))
    pipe = summarize_pipeline(record)
    if pipe is not None and pipe.in_main_process:
        n = summary.samples_per_step
        getitem = sum(s.wall_s_per_sample for s in pipe.stages if s.name != "collate") * n
        collate = sum(s.wall_s_per_sample for s in pipe.stages if s.name == "collate") * n
        wait = summary.phase_median_s.get("data_wait", 0.0)
        if getitem + collate > wait > 0:
            # In the main process a batch is loaded inside its data wait, so the median step's wait
            # bounds it. The stage costs are means over every batch: one stalled batch (a 170 ms
            # collate among 0.1 ms ones, seen in a DDP run) must not become a per-step cost.
            scale = wait / (getitem + collate)
            getitem, collate = getitem * scale, collate * scale
        # A collate call copies each sample's bytes and handles each element; the rest is per call.
        batch_bytes = sum(t.nbytes for t in cfg.batch) * micro_batches(record)
        per_sample = n * COLLATE_S_PER_SAMPLE + batch_bytes / PIN_COPY_BYTES_PER_S
        parts["collate_per_batch_s"] = max(0.0, collate - per_sample)
        # The part of the wait beyond the samples' own loading and collation: sampler and fetch overhead.
        parts["loader_overhead_s"] = max(0.0, wait - getitem - collate)
    return sum(parts.values()), parts


def _gemm_fixed_share(inp: DoctorInput, compute_s: float) -> float | None:
    """The share of forward+backward that the batch-scaling probe shows does not grow with the batch.

    The probe timed the step's own GEMM shapes at the batch's rows and at several times them: the
    per-call part of their time is fixed. Where the probed shapes hold most of forward's and
    backward's counted FLOPs, the rest of those phases is FLOP-free work on the GEMMs' inputs and
    outputs (activations, norms, autograd bookkeeping): less arithmetic per call than the GEMM that
    made its tensor, the same per-call costs, so at least as fixed a share, and the GEMMs' share is
    its lower bound. Otherwise only the GEMMs' own time (their FLOPs at the probe's rate) counts.
    ``None`` without the probe.
    """
    record = inp.record
    share = record.probes.gemm_fixed_share
    rate = record.probes.matmul_flops_per_s or record.probes.fp32_matmul_flops_per_s
    cfg = record.config
    if share is None or not rate or compute_s <= 0:
        return None
    if _probed_gemm_share(inp) is not None and _rest_lighter_than_gemms(inp, compute_s, rate):
        return share
    flops = cfg.flops_by_phase.get("forward", 0) + cfg.flops_by_phase.get("backward", 0)
    return share * min(compute_s, flops / rate) / compute_s


def _rest_lighter_than_gemms(inp: DoctorInput, compute_s: float, rate: float) -> bool:
    """The claim that lets the GEMMs' fixed share speak for all of forward and backward, checked: the
    mean op beyond the counted GEMMs takes no longer than :data:`REST_OVER_GEMM_CALL_MAX` mean GEMM
    calls (their FLOPs at the probe's rate, a lower bound on their time). Ops that take far longer
    do work the FLOP counter does not see: an LSTM's fused kernel runs its whole sequence inside one op (a 2-layer LSTM over 48
    steps at batch 64: 0.6 ms an op beside GEMM calls of microseconds; counted as fixed, the step
    model promised 6.8x from a larger batch where batch 512 measured 1.56x)."""
    cfg = inp.record.config
    by_phase = cfg.aten_ops_by_phase or {}
    ops = by_phase.get("forward", 0) + by_phase.get("backward", 0)
    shapes = [d for d in cfg.gemm_shapes if len(d) >= 5 and d[4] > 0 and min(d[:4]) > 0]
    calls = sum(d[4] / (2.0 * d[0] * d[1] * d[2] * d[3]) for d in shapes)
    if not ops or calls <= 0 or ops <= calls:
        return True  # nothing beside the GEMMs to check
    gemm_s = min(compute_s, sum(float(d[4]) for d in shapes) / rate)
    return (compute_s - gemm_s) / (ops - calls) <= REST_OVER_GEMM_CALL_MAX * gemm_s / calls


def _probed_gemm_share(inp: DoctorInput) -> float | None:
    """The batch-scaling probe's fixed share of the step's GEMM time, where the shapes it timed hold
    at least half of forward's and backward's counted FLOPs (else it does not speak for them)."""
    cfg = inp.record.config
    share = inp.record.probes.gemm_fixed_share
    flops = cfg.flops_by_phase.get("forward", 0) + cfg.flops_by_phase.get("backward", 0)
    probed_flops = sum(float(s[4]) for s in cfg.gemm_shapes if len(s) >= 5)
    if share is None or flops <= 0 or probed_flops < 0.5 * flops:
        return None
    return share


def _fixed_op_share(inp: DoctorInput) -> float:
    """The share of forward's and backward's ops whose count does not grow with the batch.

    Ops a loop over the batch's elements issues between the phases (a loss summed sample by sample:
    ``loop_over_batch``), and the autograd nodes they record, grow with the batch however small each
    is. Backward replays one node per recorded op, so its ops are split between the model and that
    loop by their forward-side counts.
    """
    ops_by_phase = inp.record.config.aten_ops_by_phase or {}
    fwd, bwd = ops_by_phase.get("forward", 0), ops_by_phase.get("backward", 0)
    loop = ops_by_phase.get("other", 0)
    if fwd + bwd <= 0 or not loop_over_batch(inp):
        return 1.0
    model_nodes = fwd / (fwd + loop) if fwd + loop > 0 else 0.0
    return (fwd + bwd * model_nodes) / (fwd + bwd)


def _growth_limit(inp: DoctorInput, batch: int) -> int:
    """How many times the batch may grow: :data:`SMALL_BATCH_MAX_GROWTH`, up to :data:`LARGE_BATCH_MAX`
    samples, less where GPU memory ends."""
    record = inp.record
    limit = max(1, min(SMALL_BATCH_MAX_GROWTH, LARGE_BATCH_MAX // max(batch, 1)))
    total = record.config.device_total_memory_bytes
    peaks = [s.cuda_peak_bytes for s in record.host if s.cuda_peak_bytes is not None]
    if is_gpu(record) and total and peaks and max(peaks) > 0:
        # The whole peak (weights and optimizer state included) scaled: conservative on purpose.
        limit = min(limit, math.floor(total * GPU_MEMORY_USABLE_SHARE / max(peaks)))
    return max(1, limit)


def _batch_fix(before: StepInputs, parts: dict[str, float], growth: int, accum: int) -> StepInputs:
    """The inputs with each batch (micro-batch under accumulation) ``growth`` times larger.

    Without accumulation the step carries ``growth`` times the samples (``batch_scale``): its fixed
    seconds stay and the loader's per-batch overhead stays per batch. With it the samples per step
    stay and what is paid per micro-batch (dispatch, the loss between phases, the loader's per-batch
    overhead) is paid ``growth`` times less often.
    """
    if accum < 2:
        return before.changed(batch_scale=float(growth), load_extra_s=before.load_extra_s / growth)
    keep = 1.0 / growth
    phases = dict(before.phases_s)
    fb = phases.get("forward", 0.0) + phases.get("backward", 0.0)
    dispatch = parts.get("dispatch_s", 0.0)
    for p in ("forward", "backward"):
        if fb > 0:
            phases[p] = phases.get(p, 0.0) - dispatch * (1 - keep) * phases.get(p, 0.0) / fb
    phases["other"] = phases.get("other", 0.0) - parts.get("other_s", 0.0) * (1 - keep)
    return before.changed(phases_s=phases, load_extra_s=before.load_extra_s * keep)


def _target_growth(before: StepInputs, parts: dict[str, float], limit: int, accum: int,
                   measured_s: float) -> tuple[int, float]:
    """The batch growth the fix names and its estimate.

    Under accumulation: the largest merge of micro-batches within ``limit`` that divides their
    count; the samples per step and the learning rate stay, so nothing argues for a smaller one
    (accumulation exists for memory, which ``limit`` accounts for). Otherwise the batch is doubled
    while the model predicts a doubling still gains :data:`REPORT_MIN_SPEEDUP` (beyond, per-sample
    time has stopped falling by more than a user could confirm), within ``limit``: each doubling
    is a learning-rate change to retune, worth making only for a gain one can see.
    """
    def price(k: int) -> float:
        return estimate(before, _batch_fix(before, parts, k, accum), measured_s)

    if accum >= 2:
        growth = max(k for k in range(1, min(limit, accum) + 1) if accum % k == 0)
        return growth, price(growth) if growth > 1 else 1.0
    growth, est = 1, 1.0
    while 2 * growth <= limit:
        nxt = price(2 * growth)
        if growth > 1 and nxt / est < REPORT_MIN_SPEEDUP:
            break
        growth, est = 2 * growth, nxt
    return growth, est


def _typical(inp: DoctorInput) -> DoctorInput:
    """The run without its stalled steps (STEP_OUTLIERS's finding): a checkpoint written every N
    steps is not a cost of the step a larger batch spreads, and its seconds would otherwise be read
    as per-step (or per-sample) work of every step."""
    slow = set(find_outliers(inp.record.steps).indices)
    if not slow:
        return inp
    steps = [s for s in inp.record.steps if s.index not in slow]
    return DoctorInput(dataclasses.replace(inp.record, steps=steps), summarize_steps(steps))


@rule("SMALL_BATCH", kind="doctor")
def small_batch(inp: DoctorInput) -> Finding | None:
    """A large share of the step is fixed per-step cost that a bigger batch would amortize."""
    inp = at_free_cores(_typical(inp))
    record, summary = inp.record, inp.summary
    t = summary.step_time_median_s
    if summary.steps == 0 or t <= 0 or summary.samples_per_step <= 0:
        return None
    fixed_s, parts = _fixed_costs_s(inp)
    share = min(1.0, fixed_s / t)
    accum = micro_batches(record)
    batch = round(summary.samples_per_step)
    micro = max(1, batch // max(accum, 1))
    # Gradient accumulation: the fixed cost that matters is paid per micro-batch; merging
    # micro-batches keeps the effective batch (and the learning rate) as it is.
    limit = min(_growth_limit(inp, micro), accum) if accum >= 2 else _growth_limit(inp, batch)
    if share < SMALL_BATCH_MIN_FIXED_SHARE or limit < 2:
        return None
    model = step_inputs(record, summary)
    if model is None:
        return None
    # Main-process loading: the per-call part of collation moves from the per-sample loading to the
    # per-batch overhead, so a larger batch pays it once.
    moved = min(model.load_cpu_s, parts.get("collate_per_batch_s", 0.0)) if model.workers == 0 else 0.0
    fixed_compute = fixed_s - parts.get("loader_overhead_s", 0.0) - parts.get("collate_per_batch_s", 0.0)
    # The parts are shares of the median step; the model's phases are means (throughput), which
    # also hold the few slow steps (collection pauses, stalls). The same shares hold there: scale
    # to the mean, or the slow steps' excess would all be taken as per-sample work.
    to_mean = max(1.0, summary.step_time_mean_s / t)
    fixed_compute *= to_mean
    before = model.changed(fixed_s=max(0.0, fixed_compute), load_cpu_s=model.load_cpu_s - moved,
                           load_extra_s=model.load_extra_s + moved)
    measured_s = summary.step_time_mean_s
    if not model.gpu and model.compute_threads > model.cores:
        # A pool larger than the cores inflates every op (THREAD_OVERSUBSCRIPTION's finding, one
        # cause, one finding): the batch is priced on the step with the pool fitted to the cores.
        before = before.changed(compute_threads=model.cores)
        measured_s = step_time(before).step_s
    growth, est = _target_growth(before, {k: v * to_mean for k, v in parts.items()}, limit, accum, measured_s)
    if growth < 2 or est < REPORT_MIN_SPEEDUP:
        return None
    loader = main_loader(record)
    lines = []
    if accum >= 2:
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
        "model_inputs_changed": ({"micro_batch": [micro, micro * growth]}
                                 if accum >= 2 else {"batch_scale": [1, growth]}),
        "step_time_s": t,
        "fixed_s_per_step": fixed_s,
        "fixed_share": share,
        "batch_growth": growth,
        "batch_growth_limit": limit,
        "aten_ops_per_step": record.config.aten_ops_per_step,
        "op_overhead_ns": record.probes.op_overhead_ns,
        "fixed_op_share": _fixed_op_share(inp),
        **parts,
    }
    unit, size = ("micro-batch", micro) if accum >= 2 else ("batch", batch)
    evidence["gemm_scale_disturbed"] = record.probes.gemm_scale_disturbed
    found = make_finding(
        "SMALL_BATCH",
        est,
        f"{share:.0%} of each step is fixed cost that does not grow with the {unit} of {size}",
        evidence,
        "\n".join(lines),
        explanation=(
            "The optimizer update, per-op dispatch and per-batch loader overhead cost the same for 1 "
            f"sample or {size * growth}. The {unit} named is where the step "
            f"model predicts a further doubling gains under {REPORT_MIN_SPEEDUP:.2f}x (per-sample time "
            f"has stopped falling); estimate: samples/s at that {unit}, the step model before over after."
            + (" The batch-scaling probe's timings were disturbed by other load even after a repeat: "
               "the fixed share is less certain." if record.probes.gemm_scale_disturbed else "")
        ),
    )
    return dataclasses.replace(found, certain=False) if record.probes.gemm_scale_disturbed else found
