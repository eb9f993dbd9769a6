"""NO_MIXED_PRECISION: fp32 compute on hardware that runs bf16 (or fp16) faster.

Where the device has native 16-bit matrix units (AMX/AVX512-BF16 on recent x86 CPUs, tensor cores
on GPUs from Volta/Ampere on), ``torch.autocast`` runs matmuls and convolutions in 16 bits while
keeping reductions and the weights in fp32. The doctor measures the device's own bf16/fp32 matmul
ratio after the script ends; the estimate applies that measured ratio, never an assumed one.
"""

from __future__ import annotations

import dataclasses

from stave.analyze.step_inputs import step_inputs
from stave.analyze.step_model import phase_s
from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.inputs import DoctorInput
from stave.diagnose.rules._helpers import REPORT_MIN_SPEEDUP, is_gpu, make_finding, phase_lines
from stave.diagnose.shared_findings import AUTOCAST_PHASES, BF16_SINCE, NO_MIXED_PRECISION
from stave.measure.config import LOW_PRECISION, PRODUCT

# Below 1.3x the casts autocast adds around each matmul eat most of the gain (the bar for
# calling a CPU's bf16 "native"); the same bar keeps GPUs honest where the probe finds little.
BF16_MIN_RATIO = 1.3
# Tensor cores for bf16 arrived with compute capability 8.0 (Ampere); the probe measures bf16.
BF16_MIN_CAPABILITY = (BF16_SINCE, 0)


def _autocast_s(inp: DoctorInput, gpu: bool) -> tuple[float, dict[str, float]]:
    """Seconds per median step of the part of forward and backward autocast speeds up (its matrix
    products and convolutions), with the numbers that set it.

    Forward and backward also hold per-op dispatch (fixed, whatever the dtype): ops x the measured
    per-op cost (on CPU, where it is on the timeline). On a CPU the FLOP counter timed every op of
    a counted step where it ran: the products' share of those times is their share of the rest of
    forward/backward. The ops whose inputs would all be bf16 under autocast (activations, pooling
    and their gradients on the products' outputs) are reported but not credited: what they gain
    follows the allocator and the cache more than the dtype (measured 2.6-4x inside a conv net's
    step, 0.6-1.6x for the same op alone), so the estimate stays on the side of the products.
    Without op times (a GPU, a compiled model) the products' time is at most the counted
    matmul/conv FLOPs at the probe's fp32 rate.
    """
    record, summary = inp.record, inp.summary
    cfg, probes = record.config, record.probes
    fwd_bwd = sum(phase_s(summary, p) for p in AUTOCAST_PHASES)
    parts: dict[str, float] = {"forward_backward_s": fwd_bwd}
    compute = fwd_bwd
    overhead = probes.op_overhead_ns
    ops = sum(cfg.aten_ops_by_phase.get(p, 0) for p in AUTOCAST_PHASES)
    if not gpu and overhead is not None and ops:
        dispatch = min(fwd_bwd, ops * overhead / 1e9)
        parts["dispatch_s"] = dispatch
        compute = fwd_bwd - dispatch
    buckets: dict[str, float] = {}
    for phase in AUTOCAST_PHASES:
        for bucket, seconds in cfg.op_s_by_phase.get(phase, {}).items():
            buckets[bucket] = buckets.get(bucket, 0.0) + seconds
    counted = sum(buckets.values())
    if not gpu and counted > 0 and buckets.get(PRODUCT, 0.0) > 0:
        parts["product_share"] = buckets.get(PRODUCT, 0.0) / counted
        parts["autocast_low_share"] = buckets.get(LOW_PRECISION, 0.0) / counted
        parts["autocast_s"] = compute * parts["product_share"]
        return parts["autocast_s"], parts
    rate = probes.fp32_matmul_flops_per_s
    flops = sum(cfg.flops_by_phase.get(p, 0) for p in AUTOCAST_PHASES) or cfg.flops_per_step
    if rate and flops:
        parts["matmul_s_at_probe_rate"] = flops / rate
        compute = min(compute, flops / rate)
    parts["autocast_s"] = compute
    return compute, parts


@rule("NO_MIXED_PRECISION", kind="doctor")
def no_mixed_precision(inp: DoctorInput) -> Finding | None:
    """The model computes in fp32 where this device's measured bf16 matmul rate is much higher."""
    record, summary = inp.record, inp.summary
    cfg = record.config
    if summary.steps == 0 or cfg.autocast_enabled:
        return None
    if cfg.param_dtypes:
        dominant = max(cfg.param_dtypes, key=lambda k: cfg.param_dtypes[k]).replace("torch.", "")
        if dominant != "float32":
            return None
    ratio = record.probes.bf16_speedup
    if ratio is None or ratio < BF16_MIN_RATIO:
        return None
    gpu = is_gpu(record)
    if gpu:
        capability = tuple(cfg.device_capability or ())
        if capability < BF16_MIN_CAPABILITY:
            return None
    elif not cfg.bf16_native:
        return None
    matmul_s, parts = _autocast_s(inp, gpu)
    model = step_inputs(record, summary)
    if model is None:
        return None
    if summary.step_time_mean_s > 0 and matmul_s / summary.step_time_mean_s < NO_MIXED_PRECISION.threshold.value:
        return None
    # The products of forward and backward run `ratio` times faster; the model prices the step.
    est = NO_MIXED_PRECISION.estimate(model, [(matmul_s, ratio)], summary.step_time_mean_s)
    if est < REPORT_MIN_SPEEDUP:
        return None
    speed = dict(getattr(est, "after", model).phase_speed)
    probes = record.probes
    device = "cuda" if gpu else "cpu"
    share = sum(summary.breakdown.get(p, 0.0) for p in AUTOCAST_PHASES)
    found = make_finding(
        "NO_MIXED_PRECISION",
        est,
        f"fp32 compute ({share:.0%} of the step) on a {device.upper()} where bf16 matmuls run {ratio:.1f}x faster",
        {
            "bf16_probe_speedup": ratio,
            "bf16_probe_shape": probes.bf16_probe_shape,
            "bf16_probe_source": probes.bf16_probe_source,
            "bf16_probe_shapes": probes.bf16_probe_shapes,
            "bf16_probe_disturbed": probes.bf16_probe_disturbed,
            "model_inputs_changed": {"phase_speed": speed},
            "forward_backward_share": share,
            "autocast_enabled": cfg.autocast_enabled,
            "param_dtypes": cfg.param_dtypes,
            "device_name": cfg.device_name,
            "bf16_native": cfg.bf16_native,
            **parts,
        },
        NO_MIXED_PRECISION.fix(device, tuple(cfg.device_capability) if gpu and cfg.device_capability else None),
        explanation=(
            "Estimate: the matmul/convolution time of forward and backward divided by the measured "
            "bf16/fp32 ratio of the step's own matrix products and convolutions (weighted by their "
            "count per step; one square GEMM where they were not counted). That time is "
            "forward+backward less the host's per-op dispatch times the products' share of a "
            "counted step's op times (without those: at most the counted FLOPs at the probe's fp32 "
            "rate). The activations and pooling on the products' outputs would run in bf16 too; "
            "their gain is not counted, so a conv net often gains more than estimated. "
            "Check the loss curve against an fp32 run."
            + (" The probe's timings were disturbed by other load even after a repeat: the ratio is "
               "less certain." if probes.bf16_probe_disturbed else "")
        ),
        lines=phase_lines(record, "forward", limit=2),
    )
    return dataclasses.replace(found, certain=False) if probes.bf16_probe_disturbed else found
