"""SYNC_IN_LOOP and EMPTY_CACHE_IN_LOOP: calls that make the host wait for the GPU every step.

The host normally runs ahead of the GPU, queueing kernels. ``.item()``, ``.cpu()``, printing a
CUDA tensor or ``torch.cuda.synchronize()`` make it wait until the queue drains; afterwards the GPU
idles until the host has queued new work. ``torch.cuda.empty_cache()`` synchronizes too, and hands
cached blocks back to the driver so the next step pays ``cudaMalloc`` again.

Without the waits, a step takes as long as the busier of the two: the GPU's work (its utilization
times the step) or the host's (the step minus the time it sat waiting, which the stack samples
charge to the waiting line).
"""

from __future__ import annotations

from stave.analyze.host import summarize_host
from stave.analyze.hotlines import seconds_at_lines
from stave.analyze.step_inputs import step_inputs
from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.inputs import DoctorInput
from stave.diagnose.rules._helpers import REPORT_MIN_SPEEDUP, counted_indices, is_gpu, make_finding
from stave.diagnose.shared_findings import SYNC_IN_LOOP, step_only_inputs

# A call in at least half the steps is part of the loop (the shared definition's threshold).
EVERY_STEP_SHARE = SYNC_IN_LOOP.threshold.value


def _overlap_estimate(inp: DoctorInput, waited_s: float) -> tuple[float, float | None]:
    """(est_speedup, GPU busy seconds per step) once the host no longer waits ``waited_s`` per step
    (SYNC_IN_LOOP's shared estimator; the GPU's busy time is its utilization times the step)."""
    t = inp.summary.step_time_median_s
    util = summarize_host(inp.record).gpu_util_pct
    if util is None or t <= 0:
        return 1.0, None
    gpu_busy = t * util / 100.0
    model = step_inputs(inp.record, inp.summary) or step_only_inputs(t)
    return SYNC_IN_LOOP.estimate(model, host_wait_s=waited_s, device_s=gpu_busy, step_s=t), gpu_busy


@rule("SYNC_IN_LOOP", kind="doctor")
def sync_in_loop(inp: DoctorInput) -> Finding | None:
    """A line of the loop synchronizes with the GPU in most steps."""
    record = inp.record
    steps = counted_indices(record)
    if not is_gpu(record) or not steps:
        return None
    sites = [
        s for s in record.syncs if s.kind != "empty_cache" and s.steps_with_call >= EVERY_STEP_SHARE * len(steps)
    ]
    if not sites:
        return None
    waited = seconds_at_lines(record.stacks, {(s.file, s.line) for s in sites}, steps) / len(steps)
    est, gpu_busy = _overlap_estimate(inp, waited)
    if gpu_busy is not None and est < REPORT_MIN_SPEEDUP:
        return None
    top = max(sites, key=lambda s: s.calls)
    return make_finding(
        "SYNC_IN_LOOP",
        est,
        f"{len(sites)} line(s) make the host wait for the GPU every step, e.g. {top.kind} at {top.file}:{top.line}",
        {
            "sites": [
                {"kind": s.kind, "line": f"{s.file}:{s.line}", "calls": s.calls, "steps_with_call": s.steps_with_call}
                for s in sites
            ],
            "host_wait_s_per_step": waited,
            "gpu_busy_s_per_step": gpu_busy,
            "step_time_s": inp.summary.step_time_median_s,
        },
        SYNC_IN_LOOP.fix(pageable_copy=top.kind == ".cpu()"),
        explanation=(
            "Estimate: T / max(GPU busy time, T - host time waiting at these lines); "
            "not estimated (1.0) where GPU utilization is absent."
        ),
        lines=[f"{s.file}:{s.line}" for s in sites],
    )


@rule("EMPTY_CACHE_IN_LOOP", kind="doctor")
def empty_cache_in_loop(inp: DoctorInput) -> Finding | None:
    """``torch.cuda.empty_cache()`` runs in most steps."""
    record = inp.record
    steps = counted_indices(record)
    calls = record.cuda_calls.get("empty_cache", 0)
    if not is_gpu(record) or not steps or not record.steps or calls < EVERY_STEP_SHARE * len(record.steps):
        return None
    sites = [s for s in record.syncs if s.kind == "empty_cache"]
    waited = (
        seconds_at_lines(record.stacks, {(s.file, s.line) for s in sites}, steps) / len(steps) if sites else 0.0
    )
    est, gpu_busy = _overlap_estimate(inp, waited)
    return make_finding(
        "EMPTY_CACHE_IN_LOOP",
        est,
        f"torch.cuda.empty_cache() runs {calls / len(record.steps):.1f} times per step",
        {
            "empty_cache_calls": calls,
            "steps": len(record.steps),
            "host_wait_s_per_step": waited,
            "gpu_busy_s_per_step": gpu_busy,
        },
        "# Delete the call from the loop: the caching allocator reuses freed blocks by itself;\n"
        "# empty_cache only helps other processes on the same GPU, and costs a sync plus cudaMalloc.\n"
        "# torch.cuda.empty_cache()",
        explanation=(
            "Each call synchronizes and returns cached memory that the next step must allocate again. "
            "Estimate as for SYNC_IN_LOOP (the reallocation cost is not included)."
        ),
        lines=[f"{s.file}:{s.line}" for s in sites],
    )
