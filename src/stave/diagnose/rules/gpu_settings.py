"""GPU settings and use: cuDNN autotuning, determinism, compilation, DataParallel, idle GPU.

Settings whose effect depends on the model's layers (cuDNN autotuning, deterministic kernels) are
reported as information with est_speedup 1.0: the doctor has not measured them, and says so.
NO_COMPILE and GPU_UNDERUSED estimate from what was measured: the host's per-op dispatch cost and
the GPU's utilization.
"""

from __future__ import annotations

from stave.analyze.host import summarize_host
from stave.analyze.step_inputs import step_inputs
from stave.analyze.step_model import phase_s
from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.inputs import DoctorInput
from stave.diagnose.rules._helpers import REPORT_MIN_SPEEDUP, is_gpu, make_finding, phase_lines, saving_speedup
from stave.diagnose.shared_findings import GPU_UNDERUSED, step_only_inputs

# Triton, which torch.compile generates GPU kernels with, needs compute capability 7.0 or newer.
COMPILE_MIN_CAPABILITY = (7, 0)
# GPU_UNDERUSED's threshold (the shared definition's, a share of the step, here in percent).
GPU_UTIL_LOW_PCT = 100.0 * GPU_UNDERUSED.threshold.value
# As in the data rules: a step waiting a tenth of its time for data is the loader's finding.
DATA_WAIT_MIN_SHARE = 0.10


@rule("CUDNN_BENCHMARK_OFF", kind="doctor")
def cudnn_benchmark_off(inp: DoctorInput) -> Finding | None:
    """A convolutional model on a GPU runs with cuDNN autotuning off."""
    cfg = inp.record.config
    if not is_gpu(inp.record) or not cfg.conv_model or cfg.cudnn_benchmark is not False:
        return None
    shapes = [f"{t.path} {t.shape}" for t in cfg.batch[:2]]
    return make_finding(
        "CUDNN_BENCHMARK_OFF",
        1.0,
        "cuDNN autotuning is off for a convolutional model",
        {"cudnn_benchmark": False, "conv_model": True, "batch_shapes": shapes},
        "torch.backends.cudnn.benchmark = True  # before the first forward; input shapes must stay fixed",
        explanation=(
            "With benchmark on, cuDNN times its convolution algorithms for each new input shape and "
            "keeps the fastest. The gain depends on the layers; not estimated (1.0): try it."
        ),
    )


@rule("DETERMINISTIC_ALGORITHMS", kind="doctor")
def deterministic_algorithms(inp: DoctorInput) -> Finding | None:
    """Deterministic kernels are enforced on a GPU."""
    cfg = inp.record.config
    if not is_gpu(inp.record) or not (cfg.deterministic_algorithms or cfg.cudnn_deterministic):
        return None
    return make_finding(
        "DETERMINISTIC_ALGORITHMS",
        1.0,
        "Deterministic GPU kernels are enforced",
        {"deterministic_algorithms": cfg.deterministic_algorithms, "cudnn_deterministic": cfg.cudnn_deterministic},
        "torch.use_deterministic_algorithms(False)\ntorch.backends.cudnn.deterministic = False\n"
        "# keep them on only for runs that must be bitwise reproducible",
        explanation=(
            "Deterministic mode rules out faster kernels (atomics in scatter/index_add backward, some "
            "cuDNN algorithms). The cost depends on the model; not estimated (1.0)."
        ),
    )


@rule("NO_COMPILE", kind="doctor")
def no_compile(inp: DoctorInput) -> Finding | None:
    """The model is not compiled and the host's per-op dispatch is a large part of the GPU step."""
    record, summary = inp.record, inp.summary
    cfg = record.config
    if not is_gpu(record) or cfg.compiled or summary.steps == 0:
        return None
    if tuple(cfg.device_capability or ()) < COMPILE_MIN_CAPABILITY:
        return None
    ops = cfg.aten_ops_per_step
    overhead = record.probes.op_overhead_ns
    util = summarize_host(record).gpu_util_pct
    if not ops or overhead is None or util is None:
        return None
    t = summary.step_time_median_s
    dispatch = min(t, ops * overhead / 1e9)
    # Fused and graph-captured, the step needs about one launch per fused kernel: it is then bound
    # by the GPU's own work, or by whatever host work remains.
    # Dispatch runs in every compute phase: taken off each in proportion to its share.
    compute_phases = ("forward", "backward", "optimizer", "other")
    share = sum(summary.breakdown.get(p, 0.0) for p in compute_phases) or 1.0
    saved = {p: dispatch * summary.breakdown.get(p, 0.0) / share for p in compute_phases}
    est = saving_speedup(inp, saved, t, device_s=t * util / 100.0)
    if est < REPORT_MIN_SPEEDUP:
        return None
    return make_finding(
        "NO_COMPILE",
        est,
        f"{ops} ops per step at {overhead / 1e3:.1f} us dispatch each keep the GPU {100 - util:.0f}% idle",
        {"aten_ops_per_step": ops, "op_overhead_ns": overhead, "dispatch_s_per_step": dispatch, "gpu_util_pct": util},
        'model = torch.compile(model, mode="reduce-overhead")  # fuses ops and replays them as a CUDA graph',
        explanation="Estimate: T / max(GPU busy time, T - ops x measured per-op overhead).",
    )


@rule("DATAPARALLEL_USED", kind="doctor")
def dataparallel_used(inp: DoctorInput) -> Finding | None:
    """The model is wrapped in ``nn.DataParallel``."""
    cfg = inp.record.config
    if not cfg.dataparallel:
        return None
    gpu = is_gpu(inp.record)
    title = (
        "nn.DataParallel replicates the model every step from one process"
        if gpu
        else "nn.DataParallel on a CPU-only run is a pass-through (no effect)"
    )
    return make_finding(
        "DATAPARALLEL_USED",
        1.0,
        title,
        {"dataparallel": True, "device_type": cfg.device_type},
        "# one process per GPU:  torchrun --nproc-per-node=N train.py\n"
        "model = torch.nn.parallel.DistributedDataParallel(model.to(local_rank), device_ids=[local_rank])"
        if gpu
        else "model = model.module  # unwrap: DataParallel does nothing without GPUs",
        explanation=(
            "DataParallel scatters inputs, replicates the weights and gathers outputs on one GPU every "
            "step, with one Python thread per GPU under the GIL; DistributedDataParallel avoids all of "
            "that. Not estimated (1.0) from a single-process run."
        ),
    )


@rule("GPU_UNDERUSED", kind="doctor")
def gpu_underused(inp: DoctorInput) -> Finding | None:
    """The GPU is idle most of the step while the step is not waiting for data."""
    record, summary = inp.record, inp.summary
    if not is_gpu(record) or summary.steps == 0:
        return None
    util = summarize_host(record).gpu_util_pct
    if util is None or util >= GPU_UTIL_LOW_PCT or summary.breakdown.get("data_wait", 0.0) >= DATA_WAIT_MIN_SHARE:
        return None
    t = summary.step_time_median_s
    # On a GPU the phases are GPU time; 'other' is the gap between them, where the GPU waits for
    # the host's Python. Removing it leaves the GPU's own work (or the rest of the step).
    other = phase_s(summary, "other")
    model = step_inputs(record, summary) or step_only_inputs(t)
    est = GPU_UNDERUSED.estimate(model, host_gap_s=other, device_s=t * util / 100.0, step_s=t)
    if est < REPORT_MIN_SPEEDUP:
        return None
    return make_finding(
        "GPU_UNDERUSED",
        est,
        f"The GPU is busy {util:.0f}% of the time; {other / t:.0%} of the step is host work between phases",
        {"gpu_util_pct": util, "other_s": other, "other_share": other / t if t else None, "step_time_s": t},
        GPU_UNDERUSED.fix(),
        explanation="Estimate: T / max(GPU busy time, T - 'other' time).",
        lines=phase_lines(record, "other"),
    )
