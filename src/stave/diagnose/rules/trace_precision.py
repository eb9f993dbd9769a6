"""Trace rules about matmul precision: NO_MIXED_PRECISION and TENSOR_CORES_UNUSED.

They exclude each other by construction: NO_MIXED_PRECISION needs a trace where no kernel works on
fp16/bf16/fp8 data at all (the job trains in fp32), TENSOR_CORES_UNUSED one where low precision is
in use yet matmul-like kernels run without tensor cores. Kernel classes come from
:mod:`stave.trace.kernels`. NO_MIXED_PRECISION is also a doctor finding: its threshold, estimator,
advice by compute capability and fix are the one definition in :mod:`stave.diagnose.shared_findings`.
"""

from __future__ import annotations

from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.rules.trace_common import REPORT_MIN_SPEEDUP, mean, speedup, trace_finding
from stave.diagnose.shared_findings import NO_MIXED_PRECISION, timeline_inputs
from stave.diagnose.shared_findings import precision_advice as shared_precision_advice
from stave.trace.analysis import TraceAnalysis

# Expected speedup of a matmul moving to bf16 tensor cores. Datasheets give 2x over TF32 tensor
# cores (A100: 156 -> 312 TFLOP/s; H100: 495 -> 989) and ~16x over fp32 CUDA cores; real kernels
# reach a fraction of either peak, so the fp32 factor is taken conservatively at 4.
BF16_OVER_TF32 = 2.0
BF16_OVER_FP32_CUDA_CORES = 4.0


def precision_advice(t: TraceAnalysis) -> tuple[str, str] | None:
    """(dtype, why) that fit the trace's device; None when it has no tensor cores at all."""
    return shared_precision_advice("cuda", t.compute_capability)


def _per_step_s(t: TraceAnalysis, key: str) -> float:
    if t.gpu is None:
        return 0.0
    return mean(t.gpu.matmul_ns_per_step.get(key, [])) / 1e9


@rule("NO_MIXED_PRECISION", kind="trace")
def no_mixed_precision(t: TraceAnalysis) -> Finding | None:
    """Matmuls and convolutions run in fp32/TF32 and nothing runs in fp16/bf16."""
    g = t.gpu
    advice = precision_advice(t)
    if g is None or g.low_precision_in_use or advice is None:
        return None
    dtype, why = advice
    T = t.step_time_median_s
    tf32 = _per_step_s(t, "tensor_core_tf32")
    fp32 = _per_step_s(t, "fp32_no_tc")
    if T <= 0 or (tf32 + fp32) / T < NO_MIXED_PRECISION.threshold.value:
        return None
    model = timeline_inputs(T, t.breakdown_share)
    est = NO_MIXED_PRECISION.estimate(model, [(tf32, BF16_OVER_TF32), (fp32, BF16_OVER_FP32_CUDA_CORES)], T)
    if est < REPORT_MIN_SPEEDUP:
        return None
    return trace_finding(
        "NO_MIXED_PRECISION",
        est,
        f"Matmuls run in {'fp32' if dtype == 'fp16' else 'fp32/TF32'} ({(tf32 + fp32) / T:.0%} of the step); "
        "no fp16/bf16 kernel ran",
        {
            "tf32_matmul_per_step_s": tf32,
            "fp32_matmul_per_step_s": fp32,
            "step_time_s": T,
            "assumed_speedup_over_tf32": BF16_OVER_TF32,
            "assumed_speedup_over_fp32": BF16_OVER_FP32_CUDA_CORES,
            "compute_capability": None if t.compute_capability is None else ".".join(map(str, t.compute_capability)),
        },
        fix=NO_MIXED_PRECISION.fix("cuda", t.compute_capability),
        explanation=(
            "Every matmul/convolution kernel works on fp32 data ("
            + ("on CUDA cores" if dtype == "fp16" else "on CUDA cores, or TF32 tensor cores")
            + f") and no kernel touched fp16/bf16. Use {dtype} autocast: {why}."
        ),
    )


@rule("TENSOR_CORES_UNUSED", kind="trace")
def tensor_cores_unused(t: TraceAnalysis) -> Finding | None:
    """Low precision is in use, but matmul-like kernels still run without tensor cores."""
    g = t.gpu
    advice = precision_advice(t)
    if g is None or not g.low_precision_in_use or advice is None:
        return None
    dtype = advice[0]
    T = t.step_time_median_s
    no_tc = _per_step_s(t, "low_no_tc") + _per_step_s(t, "fp32_no_tc")
    if T <= 0 or no_tc / T < NO_MIXED_PRECISION.threshold.value:
        return None
    saved = no_tc * (1 - 1 / BF16_OVER_FP32_CUDA_CORES)
    est = speedup(T, saved)
    if est < REPORT_MIN_SPEEDUP:
        return None
    return trace_finding(
        "TENSOR_CORES_UNUSED",
        est,
        f"fp16/bf16 is in use but {no_tc / T:.0%} of the step is matmuls without tensor cores",
        {
            "matmul_without_tensor_cores_per_step_s": no_tc,
            "low_precision_without_tc_per_step_s": _per_step_s(t, "low_no_tc"),
            "fp32_without_tc_per_step_s": _per_step_s(t, "fp32_no_tc"),
            "tensor_core_per_step_s": _per_step_s(t, "tensor_core_low"),
            "step_time_s": T,
        },
        fix=f"""\
# Tensor cores need matmul dimensions that are multiples of 8 (fp16/bf16):
hidden = 8 * ((hidden + 7) // 8)            # pad layer widths / vocab size
# and the matmuls inside autocast (ops outside it stay fp32); {dtype} fits this device:
with torch.autocast(device_type="cuda", dtype=torch.{"float16" if dtype == "fp16" else "bfloat16"}):
    loss = loss_fn(model(x), y)""",
        explanation=(
            "Some matmul/convolution kernels ran on CUDA cores although the job uses fp16/bf16: "
            "typically shapes not divisible by 8, or layers left outside autocast."
        ),
    )
