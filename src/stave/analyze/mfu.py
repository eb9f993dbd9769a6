"""Model FLOPs utilization of a doctor run: the model's counted FLOPs per step against a peak.

FLOPs are forward plus backward as the op counter counted them on one warm-up step (the optimizer
is left out, by the usual convention). The peak is the GPU's dense bf16/fp16 tensor-core peak
from the known-GPU table, or on a CPU the doctor's measured fp32 matmul rate (a measured peak for
the precision the run used, not a datasheet number). Unknown when either is missing.
"""

from __future__ import annotations

from dataclasses import dataclass

from stave import device as dev
from stave.analyze.breakdown import StepSummary
from stave.measure.record import RunRecord

MODEL_PHASES = ("forward", "backward")


@dataclass(frozen=True)
class Utilization:
    """MFU (0-1), the FLOPs per step behind it, the peak and where the peak came from."""

    mfu: float
    flops_per_step: int
    peak_flops_per_s: float
    peak_source: str


def model_flops_utilization(record: RunRecord, summary: StepSummary) -> Utilization | None:
    """MFU over the median training step, or None when the FLOPs or a peak are not known."""
    cfg = record.config
    flops = sum(cfg.flops_by_phase.get(p, 0) for p in MODEL_PHASES)
    t = summary.step_time_median_s
    if not flops or t <= 0:
        return None
    if cfg.device_type == "cuda":
        peak = dev.known_gpu_peak_flops(cfg.device_name)
        source = "dense bf16/fp16 peak of the GPU"
    else:
        peak = record.probes.matmul_flops_per_s or record.probes.fp32_matmul_flops_per_s
        dtype = "bf16" if cfg.gemm_dtype == "bfloat16" else ("fp16" if cfg.gemm_dtype == "float16" else "fp32")
        source = f"measured {dtype} matmul rate of this CPU"
    if not peak:
        return None
    return Utilization(flops / t / peak, flops, peak, source)
