"""Trace rules about keeping the GPU fed: GPU_UNDERUSED, LAUNCH_BOUND, SYNC_IN_LOOP, H2D_PAGEABLE, COMM_EXPOSED.

Each addresses a disjoint slice of the step where it can: LAUNCH_BOUND takes the GPU idle time inside
launch-bound stretches, SYNC_IN_LOOP the idle time that follows sync calls, and GPU_UNDERUSED only
the host-side idle time those two do not explain, so two findings never claim the same time.
"""

from __future__ import annotations

from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.rules.trace_common import REPORT_MIN_SPEEDUP, mean, speedup, trace_finding
from stave.trace.analysis import TraceAnalysis
from stave.trace.kernels import DATA_PARALLEL_COLLECTIVES

# A step that keeps the GPU busy less than 80% of the time leaves a fifth of the hardware unused;
# well-fed training loops measure 90% and more.
UNDERUSED_UTILIZATION = 0.80
# One sync call or more per step, on average, is in the training loop; fewer is periodic logging.
MIN_SYNC_CALLS_PER_STEP = 1.0
# Communication exposed (not overlapped by compute) above this share of the step means overlap of
# gradient all-reduce with backward is not working, or the network is the bottleneck.
COMM_EXPOSED_SHARE = 0.10
GPU_HOST_PARTS = ("runtime", "cpu_exec", "other")
GPU_BUSY_PARTS = ("kernel", "memcpy", "memset", "communication")


def _busy_floor(t: TraceAnalysis) -> float:
    return sum(t.part_mean_s(p) for p in GPU_BUSY_PARTS)


def _sync_idle_s(t: TraceAnalysis) -> float:
    return mean(t.syncs.gpu_idle_after_ns_per_step) / 1e9 if t.syncs else 0.0


def _launch_idle_s(t: TraceAnalysis) -> float:
    return mean(t.launch.idle_ns_per_step.tolist()) / 1e9 if t.launch else 0.0


@rule("GPU_UNDERUSED", kind="trace")
def gpu_underused(t: TraceAnalysis) -> Finding | None:
    """The GPU runs no kernel for a large part of the step while the host works."""
    if t.gpu is None or t.gpu.utilization >= UNDERUSED_UTILIZATION:
        return None
    T = t.step_time_median_s
    host_idle = sum(t.part_mean_s(p) for p in GPU_HOST_PARTS)
    # The fix cuts Python and op overhead; the runtime calls that launch the work remain.
    saved = max(0.0, host_idle - t.part_mean_s("runtime") - _launch_idle_s(t) - _sync_idle_s(t))
    est = speedup(T, saved, _busy_floor(t))
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
            "idle_host_wait_s": t.gpu.idle_host_wait_s,
        },
        fix="""\
# Give the GPU more work per launch and less Python between launches:
model = torch.compile(model)            # fuses small ops, cuts per-op host overhead
# and/or raise the batch size until GPU utilization stops rising:
loader = DataLoader(dataset, batch_size=2 * batch_size, ...)""",
        explanation=(
            "During these parts of the step no kernel, copy or collective ran on the GPU while the "
            "host executed runtime calls, PyTorch ops or Python. The estimate removes that host time "
            "except the runtime calls themselves (the launches remain) and what LAUNCH_BOUND and "
            "SYNC_IN_LOOP already account for."
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
_SYNC_FIX = """\
# Keep values on the GPU inside the loop; read them every N steps:
running_loss += loss.detach()          # not loss.item()
if step % log_every == 0:
    logger.info("loss %.4f", (running_loss / log_every).item())   # one sync per N steps
    running_loss.zero_()"""
_PAGEABLE_COPY_FIX = """\
# A device-to-host copy into pageable memory blocks the host until the GPU reaches it.
# Copy into a pinned buffer without blocking, and read it only when needed:
host_buf = torch.empty(shape, dtype=dtype, pin_memory=True)     # once, outside the loop
host_buf.copy_(t, non_blocking=True)
done = torch.cuda.Event(); done.record()
...                                                             # more GPU work meanwhile
done.synchronize()                                              # only where the value is used"""


@rule("SYNC_IN_LOOP", kind="trace")
def sync_in_loop(t: TraceAnalysis) -> Finding | None:
    """Host-device synchronizations inside every step."""
    s = t.syncs
    # Without step markers a call cannot be placed in the loop rather than in set-up.
    if s is None or not t.steps_marked:
        return None
    large = s.largest_call is not None and s.largest_share >= LARGE_BLOCK_SHARE
    if s.calls_per_step < MIN_SYNC_CALLS_PER_STEP and not large:
        return None
    T = t.step_time_median_s
    saved = _sync_idle_s(t)
    est = speedup(T, saved, _busy_floor(t))
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
            "host_blocked_s": s.blocked_s,
            "gpu_idle_after_sync_per_step_s": saved,
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
        fix=_PAGEABLE_COPY_FIX if pageable else _SYNC_FIX,
        lines=lines,
        explanation=(
            "Each synchronizing call makes the host wait until the GPU drains; afterwards the GPU "
            "idles until the host launches again. The estimate removes that GPU idle time."
        ),
    )


@rule("H2D_PAGEABLE", kind="trace")
def h2d_pageable(t: TraceAnalysis) -> Finding | None:
    """Host-to-device copies from pageable memory: slower, and they block the host."""
    g = t.gpu
    if g is None or g.pageable_h2d_per_step < 1:
        return None
    pageable = [m for m in g.memcpy if m.direction == "HtoD" and m.host_memory == "pageable"]
    T = t.step_time_median_s
    saved = mean(g.pageable_h2d_exposed_ns_per_step) / 1e9
    est = speedup(T, saved)
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
            "exposed_copy_per_step_s": saved,
            "step_time_s": T,
        },
        fix="""\
loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers, pin_memory=True)
for x, y in loader:
    x = x.to(device, non_blocking=True)   # pinned source: async copy, overlaps compute
    y = y.to(device, non_blocking=True)""",
        explanation=(
            "Copies from pageable memory go through a staging buffer and block the host; from pinned "
            "memory they run asynchronously and overlap kernels. The estimate removes the copy time "
            "not already hidden under kernels."
        ),
    )


# Gradient all-reduce / reduce-scatter / all-gather: DDP and FSDP settings decide how early they start.
_DATA_PARALLEL_FIX = """\
# DDP: overlap gradient all-reduce with backward, in buckets that start early:
model = DDP(model, device_ids=[local_rank], bucket_cap_mb=25,
            gradient_as_bucket_view=True, static_graph=True)
# with gradient accumulation, skip the all-reduce on all but the last micro-step:
with model.no_sync():
    loss.backward()
# FSDP: prefetch the next all-gather during the current layer's compute:
#   FSDP(model, backward_prefetch=BackwardPrefetch.BACKWARD_PRE, forward_prefetch=True)"""
# All-to-all (expert / embedding parallelism) and send/recv (pipeline stages): bucket settings do
# not touch them; only the schedule and the payload do.
_POINT_TO_POINT_FIX = """\
# all-to-all / send-recv traffic: DDP bucket settings do not apply. Hide it behind compute:
# - pipeline parallel: more micro-batches per step, or an interleaved 1F1B schedule
#   (torch.distributed.pipelining.ScheduleInterleaved1F1B), so stages send while others compute;
# - expert/embedding all-to-all: overlap the exchange of one micro-batch with the compute of
#   another, and shrink the payload (bf16/fp8 activations, a lower capacity factor)."""


@rule("COMM_EXPOSED", kind="trace")
def comm_exposed(t: TraceAnalysis) -> Finding | None:
    """Communication that no computation hides."""
    if t.gpu is None:
        return None
    share = t.breakdown_share.get("communication", 0.0)
    if share < COMM_EXPOSED_SHARE:
        return None
    T = t.step_time_median_s
    saved = t.part_mean_s("communication")
    est = speedup(T, saved, t.part_mean_s("kernel"))
    if est < REPORT_MIN_SPEEDUP:
        return None
    by_kind = t.gpu.comm_s_by_collective
    dominant = max(by_kind, key=by_kind.__getitem__) if by_kind else "other"
    fix = _DATA_PARALLEL_FIX if dominant in DATA_PARALLEL_COLLECTIVES else _POINT_TO_POINT_FIX
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
        fix=fix,
        explanation=(
            f"Communication kernels (mostly {dominant}) ran while no compute kernel or copy did. Part of it can be a rank "
            "waiting for a slower one (see RANK_STRAGGLER). The estimate hides all of it behind "
            "compute, an upper bound."
        ),
    )
