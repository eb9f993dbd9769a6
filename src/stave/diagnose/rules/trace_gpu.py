"""Trace rules about keeping the GPU fed: GPU_UNDERUSED, LAUNCH_BOUND, SYNC_IN_LOOP, H2D_PAGEABLE, COMM_EXPOSED.

Each addresses a disjoint slice of the step where it can: LAUNCH_BOUND takes the GPU idle time inside
launch-bound stretches, SYNC_IN_LOOP the idle time that follows sync calls, and GPU_UNDERUSED only
the host-side idle time those two do not explain, so two findings never claim the same time.

GPU_UNDERUSED, SYNC_IN_LOOP, H2D_PAGEABLE and COMM_EXPOSED are also doctor findings: their
threshold, estimator and fix are the one definition in :mod:`stave.diagnose.shared_findings`; the
rules here say what the trace measured, as the step model's inputs (:func:`timeline_inputs`).
"""

from __future__ import annotations

from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.rules.trace_common import REPORT_MIN_SPEEDUP, mean, speedup, trace_finding
from stave.diagnose.shared_findings import COMM_EXPOSED, GPU_UNDERUSED, H2D_PAGEABLE, SYNC_IN_LOOP, timeline_inputs
from stave.trace.analysis import TraceAnalysis
from stave.trace.kernels import DATA_PARALLEL_COLLECTIVES
GPU_HOST_PARTS = ("runtime", "cpu_exec", "other")
GPU_BUSY_PARTS = ("kernel", "memcpy", "memset", "communication")


def _busy_floor(t: TraceAnalysis) -> float:
    return sum(t.part_mean_s(p) for p in GPU_BUSY_PARTS)


def _sync_idle_s(t: TraceAnalysis) -> float:
    return mean(t.syncs.gpu_idle_after_ns_per_step) / 1e9 if t.syncs else 0.0


def _launch_idle_s(t: TraceAnalysis) -> float:
    return mean(t.launch.idle_ns_per_step.tolist()) / 1e9 if t.launch else 0.0


def _model(t: TraceAnalysis):
    """The step model's inputs of the trace's median step (its breakdown's shares of it)."""
    return timeline_inputs(t.step_time_median_s, t.breakdown_share)


@rule("GPU_UNDERUSED", kind="trace")
def gpu_underused(t: TraceAnalysis) -> Finding | None:
    """The GPU runs no kernel for a large part of the step while the host works."""
    if t.gpu is None or t.gpu.utilization >= GPU_UNDERUSED.threshold.value:
        return None
    T = t.step_time_median_s
    host_idle = sum(t.part_mean_s(p) for p in GPU_HOST_PARTS)
    # The fix cuts Python and op overhead; the runtime calls that launch the work remain.
    saved = max(0.0, host_idle - t.part_mean_s("runtime") - _launch_idle_s(t) - _sync_idle_s(t))
    est = GPU_UNDERUSED.estimate(_model(t), host_gap_s=saved, device_s=_busy_floor(t), step_s=T)
    if est < REPORT_MIN_SPEEDUP:
        return None
    return trace_finding(
        "GPU_UNDERUSED",
        est,
        f"The GPU is busy only {t.gpu.utilization:.0%} of each step; the host is the bottleneck",
        {
            "gpu_utilization": t.gpu.utilization,
            "step_time_s": T,
            "host_idle_per_step_s": host_idle,
            "runtime_per_step_s": t.part_mean_s("runtime"),
            "cpu_exec_per_step_s": t.part_mean_s("cpu_exec"),
            "other_per_step_s": t.part_mean_s("other"),
            "explained_by_other_findings_s": host_idle - saved,
            "host_gap_per_step_s": saved,
            "gpu_busy_per_step_s": _busy_floor(t),
            "idle_host_wait_s": t.gpu.idle_host_wait_s,
        },
        fix=GPU_UNDERUSED.fix(),
        explanation=(
            "During these parts of the step no kernel, copy or collective ran on the GPU while the "
            "host executed runtime calls, PyTorch ops or Python. The estimate removes that host time "
            "except the runtime calls themselves (the launches remain) and what LAUNCH_BOUND and "
            "SYNC_IN_LOOP already account for; the GPU's busy time bounds the step."
        ),
    )


@rule("LAUNCH_BOUND", kind="trace")
def launch_bound(t: TraceAnalysis) -> Finding | None:
    """Runs of kernels shorter than their own launch: the host cannot launch fast enough."""
    lb = t.launch
    if lb is None or lb.stretches == 0:
        return None
    T = t.step_time_median_s
    saved = _launch_idle_s(t)
    est = speedup(T, saved, _busy_floor(t))
    if est < REPORT_MIN_SPEEDUP:
        return None
    return trace_finding(
        "LAUNCH_BOUND",
        est,
        f"{lb.stretch_kernels} kernels in {lb.stretches} stretches ran shorter than their launch calls",
        {
            "stretches": lb.stretches,
            "kernels_in_stretches": lb.stretch_kernels,
            "longest_stretch_kernels": lb.longest_stretch_kernels,
            "launch_bound_kernels": lb.launch_bound_kernels,
            "kernels_with_launch": lb.kernels_with_launch,
            "stretch_span_s": lb.stretch_span_ns / 1e9,
            "gpu_idle_in_stretches_per_step_s": saved,
            "step_time_s": T,
        },
        fix="""\
# Launch many small kernels as one: CUDA graphs through torch.compile
model = torch.compile(model, mode="reduce-overhead")
# for the optimizer, use the fused / foreach implementation
optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)""",
        explanation=(
            "Inside these stretches each kernel finished before the host had launched the next one, "
            "so the GPU idled between kernels. The estimate removes the GPU idle time inside them."
        ),
    )


# A single blocking call holding the host for this share of its step is named in the title: it is
# the step's bottleneck whatever the other calls do.
LARGE_BLOCK_SHARE = 0.20


@rule("SYNC_IN_LOOP", kind="trace")
def sync_in_loop(t: TraceAnalysis) -> Finding | None:
    """Host-device synchronizations inside the steps."""
    s = t.syncs
    # Without step markers a call cannot be placed in the loop rather than in set-up.
    if s is None or not t.steps_marked or not t.step_count:
        return None
    large = s.largest_call is not None and s.largest_share >= LARGE_BLOCK_SHARE
    if s.steps_with_calls < SYNC_IN_LOOP.threshold.value * t.step_count and not large:
        return None
    T = t.step_time_median_s
    idle = _sync_idle_s(t)
    blocked = s.blocked_s / t.step_count
    # Without the waits the host saves the time it blocked, and the GPU the idle that followed
    # them: the step loses the smaller of the two (the model's device_s is the step less that idle).
    device_s = max(T - idle, _busy_floor(t))
    est = SYNC_IN_LOOP.estimate(_model(t), host_wait_s=blocked, device_s=device_s, step_s=T)
    if est < REPORT_MIN_SPEEDUP:
        return None
    top = s.sites[0] if s.sites else None
    lines = [
        f"{site.file}:{site.line} ({site.function})" for site in s.sites if site.file is not None
    ][:5]
    where = ""
    if top is not None:
        where = f" (mostly {top.call}" + (f" in {top.op}" if top.op else "") + ")"
    title = f"{s.calls_per_step:.1f} synchronizing calls per step stall the GPU{where}"
    if large:
        title = (f"{s.largest_call}" + (f" in {s.largest_op}" if s.largest_op else "")
                 + f" blocks the host for {s.largest_share:.0%} of step {s.largest_step}"
                 + f" ({s.calls_per_step:.1f} blocking calls per step)")
    pageable = large and "pageable" in (s.largest_call or "")
    return trace_finding(
        "SYNC_IN_LOOP",
        est,
        title,
        {
            "sync_calls": s.calls,
            "sync_calls_per_step": s.calls_per_step,
            "steps_with_sync_calls": s.steps_with_calls,
            "host_blocked_s": s.blocked_s,
            "host_blocked_per_step_s": blocked,
            "gpu_idle_after_sync_per_step_s": idle,
            "gpu_needs_per_step_s": device_s,
            "largest_call": s.largest_call,
            "largest_call_op": s.largest_op,
            "largest_call_blocked_s": s.largest_blocked_s,
            "largest_call_step": s.largest_step,
            "largest_call_share_of_step": s.largest_share,
            "step_time_s": T,
            "sites": [
                {"call": x.call, "op": x.op, "file": x.file, "line": x.line, "count": x.count,
                 "gpu_idle_after_s": x.gpu_idle_after_s}
                for x in s.sites[:5]
            ],
        },
        fix=SYNC_IN_LOOP.fix(pageable_copy=pageable),
        lines=lines,
        explanation=(
            "Each synchronizing call makes the host wait until the GPU drains; afterwards the GPU "
            "idles until the host launches again. Without the waits the host saves the time it "
            "blocked and the GPU the idle that followed; the estimate takes the smaller of the two "
            "per step (the step model, host time against the GPU's)."
        ),
    )


@rule("H2D_PAGEABLE", kind="trace")
def h2d_pageable(t: TraceAnalysis) -> Finding | None:
    """Host-to-device copies from pageable memory: slower, and they block the host."""
    g = t.gpu
    if g is None or g.pageable_h2d_per_step < 1 or not t.step_count:
        return None
    T = t.step_time_median_s
    h2d_s = sum(m.busy_s for m in g.memcpy if m.direction == "HtoD") / t.step_count
    if T <= 0 or h2d_s / T < H2D_PAGEABLE.threshold.value:
        return None
    pageable = [m for m in g.memcpy if m.direction == "HtoD" and m.host_memory == "pageable"]
    exposed = mean(g.pageable_h2d_exposed_ns_per_step) / 1e9
    est = H2D_PAGEABLE.estimate(_model(t), pageable_copy_s=exposed, step_s=T)
    if est < REPORT_MIN_SPEEDUP:
        return None
    nbytes = sum(m.bytes for m in pageable)
    busy = sum(m.busy_s for m in pageable)
    return trace_finding(
        "H2D_PAGEABLE",
        est,
        f"{g.pageable_h2d_per_step:.0f} host-to-device copies per step come from pageable memory",
        {
            "copies_per_step": g.pageable_h2d_per_step,
            "bytes": nbytes,
            "copy_time_s": busy,
            "bandwidth_bytes_per_s": nbytes / busy if busy else None,
            "h2d_per_step_s": h2d_s,
            "exposed_copy_per_step_s": exposed,
            "step_time_s": T,
        },
        fix=H2D_PAGEABLE.fix(),
        explanation=(
            "Copies from pageable memory go through a staging buffer and block the host; from pinned "
            "memory they run faster and, with non_blocking=True, asynchronously. The estimate speeds "
            "up the pageable copy time not already hidden under kernels as pinned memory would."
        ),
    )


@rule("COMM_EXPOSED", kind="trace")
def comm_exposed(t: TraceAnalysis) -> Finding | None:
    """Communication that no computation hides."""
    if t.gpu is None:
        return None
    share = t.breakdown_share.get("communication", 0.0)
    if share < COMM_EXPOSED.threshold.value:
        return None
    T = t.step_time_median_s
    saved = t.part_mean_s("communication")
    est = COMM_EXPOSED.estimate(_model(t), exposed_s=saved, device_s=_busy_floor(t) - saved, step_s=T)
    if est < REPORT_MIN_SPEEDUP:
        return None
    by_kind = t.gpu.comm_s_by_collective
    dominant = max(by_kind, key=by_kind.__getitem__) if by_kind else "other"
    return trace_finding(
        "COMM_EXPOSED",
        est,
        f"{share:.0%} of the step is communication that no computation overlaps",
        {
            "exposed_communication_per_step_s": saved,
            "communication_overlap": t.gpu.communication_overlap,
            "communication_kernel_s": t.gpu.communication_busy_s,
            "dominant_collective": dominant,
            **{f"{k}_kernel_s": v for k, v in sorted(by_kind.items())},
            "step_time_s": T,
        },
        fix=COMM_EXPOSED.fix(data_parallel=dominant in DATA_PARALLEL_COLLECTIVES),
        explanation=(
            f"Communication kernels (mostly {dominant}) ran while no compute kernel or copy did. Part of it can be a rank "
            "waiting for a slower one (see RANK_STRAGGLER). The estimate hides all of it behind "
            "compute, an upper bound."
        ),
    )
