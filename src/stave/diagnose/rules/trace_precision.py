"""Trace rules about matmul precision: NO_MIXED_PRECISION and TENSOR_CORES_UNUSED.

They exclude each other by construction: NO_MIXED_PRECISION needs a trace where no kernel works on
fp16/bf16/fp8 data at all (the job trains in fp32), TENSOR_CORES_UNUSED one where low precision is
in use yet matmul-like kernels run without tensor cores. Kernel classes come from
:mod:`stave.trace.kernels`.
"""

from __future__ import annotations

from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.rules.trace_common import REPORT_MIN_SPEEDUP, mean, speedup, trace_finding
from stave.trace.analysis import TraceAnalysis

# Expected speedup of a matmul moving to bf16 tensor cores. Datasheets give 2x over TF32 tensor
# cores (A100: 156 -> 312 TFLOP/s; H100: 495 -> 989) and ~16x over fp32 CUDA cores; real kernels
# reach a fraction of either peak, so the fp32 factor is taken conservatively at 4.
BF16_OVER_TF32 = 2.0
BF16_OVER_FP32_CUDA_CORES = 4.0
# Matmul time below this share of the step is not worth a precision change.
MIN_MATMUL_SHARE = 0.05
# Compute capabilities: tensor cores from Volta (7.0); bf16 and TF32 from Ampere (8.0). The device
# family comes from the trace's deviceProperties, never from its marketing name.
TENSOR_CORES_SINCE = 7
BF16_SINCE = 8

_BF16_FIX = """\
with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
    loss = loss_fn(model(x), y)
loss.backward()          # no GradScaler needed with bf16
optimizer.step()"""
_FP16_FIX = """\
scaler = torch.amp.GradScaler("cuda")   # fp16 needs loss scaling
with torch.autocast(device_type="cuda", dtype=torch.float16):
    loss = loss_fn(model(x), y)
scaler.scale(loss).backward()
scaler.step(optimizer)
scaler.update()"""
_EITHER_FIX = """\
# The trace does not name the GPU's compute capability: bf16 on Ampere (sm80) and later,
# fp16 with torch.amp.GradScaler on Volta/Turing (sm70/sm75: no bf16 tensor cores, no TF32).
with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
    loss = loss_fn(model(x), y)"""


def precision_advice(t: TraceAnalysis) -> tuple[str, str, str] | None:
    """(dtype, fix, why) that fit the trace's device; None when it has no tensor cores at all."""
    cc = t.compute_capability
    if cc is None:
        return "bf16 or fp16", _EITHER_FIX, "the trace does not give the device's compute capability"
    if cc[0] >= BF16_SINCE:
        return "bf16", _BF16_FIX, f"sm{cc[0]}{cc[1]} has bf16 tensor cores at twice the TF32 rate, no GradScaler needed"
    if cc[0] >= TENSOR_CORES_SINCE:
        return ("fp16", _FP16_FIX,
                f"sm{cc[0]}{cc[1]} has fp16 tensor cores but neither bf16 tensor cores nor TF32: fp16 autocast "
                "with a GradScaler")
    return None


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
    dtype, fix, why = advice
    T = t.step_time_median_s
    tf32 = _per_step_s(t, "tensor_core_tf32")
    fp32 = _per_step_s(t, "fp32_no_tc")
    if T <= 0 or (tf32 + fp32) / T < MIN_MATMUL_SHARE:
        return None
    saved = tf32 * (1 - 1 / BF16_OVER_TF32) + fp32 * (1 - 1 / BF16_OVER_FP32_CUDA_CORES)
    est = speedup(T, saved)
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
        fix=fix,
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
    if T <= 0 or no_tc / T < MIN_MATMUL_SHARE:
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
