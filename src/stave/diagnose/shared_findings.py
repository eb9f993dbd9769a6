"""One definition per finding ID that both the doctor and ``stave trace`` report.

SYNC_IN_LOOP, H2D_PAGEABLE, GPU_UNDERUSED, NO_MIXED_PRECISION and COMM_EXPOSED are measured either
by a doctor run (stack samples, NVML, copy hooks, probes) or from a profiler trace (the exact
timeline). Whichever source measured them, each ID has one :class:`Definition` here: its title,
its threshold with the reason for it, its estimator and its fix text. The doctor's rule
(``diagnose/rules/...``) and the trace's rule (``diagnose/rules/trace_*.py``) only say what they
measured, in the step model's terms (:mod:`stave.analyze.step_model`):

* the **model inputs** of the measured step: the doctor's come from its run
  (:func:`stave.analyze.step_inputs.step_inputs`); a trace's from its additive breakdown
  (:func:`timeline_inputs`);
* the **quantities the fix changes**: seconds of host wait or host work per step, the copy time,
  the matmul time and how much faster it gets, the exposed communication;
* ``device_s``: the GPU's time per step once the fix is in, which bounds the step from below.

The estimator turns those into the model's step before and after the fix; the same numbers give the
same estimate and the same fix text from either source (tests/unit/diagnose/test_shared_findings.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from stave.analyze.step_model import StepInputs, estimate, without_phase_time

# --- the model of a measured step --------------------------------------------------------------

# Parts of a trace's additive breakdown (stave.trace.breakdown) and the model phase holding each. On a
# GPU the model's phases are what the device timeline shows: compute kernels are the model's compute
# ("forward": a trace does not split forward from backward), copies its "h2d", host work and the
# GPU work no fix here changes its "other"; the data loader's time is main-process loading.
TIMELINE_PHASES = {
    "kernel": "forward",
    "memcpy": "h2d",
    "memset": "other",
    "communication": "other",
    "runtime": "other",
    "cpu_exec": "other",
    "other": "other",
}


def timeline_inputs(step_s: float, shares: dict[str, float]) -> StepInputs:
    """The step model's inputs for a step measured on a GPU timeline (a trace's breakdown).

    ``shares`` are the breakdown's time-weighted shares (they sum to 1); each part's seconds are its
    share of ``step_s``, as the doctor's phases are (:func:`stave.analyze.step_model.phase_s`), so
    the model's step before any fix is ``step_s``.
    """
    phases: dict[str, float] = {}
    for part, share in shares.items():
        if part == "dataloader":
            continue
        phase = TIMELINE_PHASES.get(part, "other")
        phases[phase] = phases.get(phase, 0.0) + share * step_s
    return StepInputs(phases_s=phases, cores=1.0, gpu=True, load_extra_s=shares.get("dataloader", 0.0) * step_s)


def step_only_inputs(step_s: float) -> StepInputs:
    """The model's inputs when only the step time is known (the whole step is host-side "other")."""
    return StepInputs(phases_s={"other": step_s}, cores=1.0, gpu=True)


def removed_time(model: StepInputs, saved_s: dict[str, float], step_s: float, device_s: float | None = None) -> float:
    """``est_speedup`` of a fix that removes ``saved_s`` seconds from the named phases, with the
    GPU's time per step after the fix (``device_s``) bounding the step from below."""
    before = model if device_s is None else model.changed(device_s=device_s)
    return estimate(before, without_phase_time(before, saved_s), step_s)


# --- definitions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Threshold:
    """A named threshold and why it has its value."""

    name: str
    value: float
    reason: str


@dataclass(frozen=True)
class Definition:
    """One finding ID: what it is, when it fires, how its fix is priced, what the fix says."""

    id: str
    title: str
    threshold: Threshold
    # The fix as a change to the model's inputs, one line (evidence and docs).
    model_change: str
    estimate: Callable[..., float]
    fix: Callable[..., str]


# SYNC_IN_LOOP ---------------------------------------------------------------------------------


def _sync_estimate(model: StepInputs, host_wait_s: float, device_s: float | None, step_s: float) -> float:
    """The host no longer waits ``host_wait_s`` per step; the GPU then needs ``device_s`` per step
    (the doctor: its busy time; a trace: the step less the GPU idle that followed the waits)."""
    return removed_time(model, {"other": host_wait_s}, step_s, device_s)


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


def _sync_fix(pageable_copy: bool = False) -> str:
    """The fix; ``pageable_copy`` when the blocking call that dominates is a copy into pageable memory."""
    return _PAGEABLE_COPY_FIX if pageable_copy else _SYNC_FIX


SYNC_IN_LOOP = Definition(
    id="SYNC_IN_LOOP",
    title="the host waits for the GPU inside the loop",
    threshold=Threshold("EVERY_STEP_SHARE", 0.5,
                        "a call in at least half the steps is part of the loop, not an occasional log line"),
    model_change="phases_s['other'] loses the host's wait per step; device_s bounds the step",
    estimate=_sync_estimate,
    fix=_sync_fix,
)

# H2D_PAGEABLE ---------------------------------------------------------------------------------

# Staging through the driver's bounce buffer adds a host memcpy per chunk and serializes it with
# the DMA: NVIDIA's bandwidthTest shows pageable copies at about half of pinned on PCIe systems.
PINNED_COPY_SPEEDUP = 2.0


def _pageable_estimate(model: StepInputs, pageable_copy_s: float, step_s: float,
                       pinned_speedup: float | None = None) -> float:
    """The ``pageable_copy_s`` seconds per step of copies from pageable memory run ``pinned_speedup``
    times faster from pinned memory: the pinned probe's measurement on this machine where it ran,
    else :data:`PINNED_COPY_SPEEDUP`."""
    speedup = max(1.0, pinned_speedup if pinned_speedup is not None else PINNED_COPY_SPEEDUP)
    return removed_time(model, {"h2d": pageable_copy_s * (1.0 - 1.0 / speedup)}, step_s)


def _pageable_fix(loader_call: str | None = None) -> str:
    """The fix; ``loader_call`` is the user's own ``DataLoader(...)`` with ``pin_memory=True`` where known."""
    call = loader_call or "loader = DataLoader(dataset, ..., pin_memory=True)"
    return f"{call}\nx = x.to(device, non_blocking=True)  # pinned + non_blocking: a DMA queued on the stream"


H2D_PAGEABLE = Definition(
    id="H2D_PAGEABLE",
    title="copies to the GPU come from pageable host memory",
    threshold=Threshold("H2D_MIN_SHARE", 0.05,
                        "copies below this share of the step cannot reach the warning level whatever is done to them"),
    model_change=("phases_s['h2d'] loses (1 - 1/r) of the pageable copy time, r the pinned probe's measured "
                  f"pageable/pinned copy time ({PINNED_COPY_SPEEDUP:g} where it did not run)"),
    estimate=_pageable_estimate,
    fix=_pageable_fix,
)

# GPU_UNDERUSED --------------------------------------------------------------------------------


def _underused_estimate(model: StepInputs, host_gap_s: float, device_s: float | None, step_s: float) -> float:
    """The host's ``host_gap_s`` per step between the GPU's work goes; the GPU's ``device_s`` stays."""
    return removed_time(model, {"other": host_gap_s}, step_s, device_s)


def _underused_fix() -> str:
    return (
        "# Move host work out of the step (metrics, logging, Python loops) or batch it; then\n"
        'model = torch.compile(model, mode="reduce-overhead")  # fewer, larger launches\n'
        "# and/or raise the batch size until GPU utilization stops rising"
    )


GPU_UNDERUSED = Definition(
    id="GPU_UNDERUSED",
    title="the GPU idles while the host works",
    threshold=Threshold("UNDERUSED_UTILIZATION", 0.80,
                        "a step that keeps the GPU busy less than 80% of the time leaves a fifth of it unused; "
                        "well-fed training loops measure 90% and more"),
    model_change="phases_s['other'] loses the host's time between the GPU's work; device_s bounds the step",
    estimate=_underused_estimate,
    fix=_underused_fix,
)

# NO_MIXED_PRECISION ---------------------------------------------------------------------------

# Compute capabilities: tensor cores from Volta (7.0); bf16 and TF32 from Ampere (8.0). The device
# family comes from the compute capability, never from its marketing name.
TENSOR_CORES_SINCE = 7
BF16_SINCE = 8
# The phases autocast speeds up: the model's matmuls and convolutions run in forward and backward;
# the optimizer keeps fp32 master weights.
AUTOCAST_PHASES = ("forward", "backward")


def _precision_estimate(model: StepInputs, matmul_s_and_ratio: list[tuple[float, float]], step_s: float) -> float:
    """Each ``(seconds, ratio)``: matmul time per step that runs ``ratio`` times faster in 16 bits
    (the doctor: its measured bf16/fp32 ratio; a trace: the datasheet ratio of the kernels' kind).
    The saving is a speed factor on forward and backward, never more than their time."""
    fb = sum(model.phases_s.get(p, 0.0) for p in AUTOCAST_PHASES)
    saved = min(sum(s * (1.0 - 1.0 / max(r, 1e-9)) for s, r in matmul_s_and_ratio), fb)
    factor = fb / (fb - saved) if fb > saved else 1.0
    return estimate(model, model.changed(phase_speed={p: factor for p in AUTOCAST_PHASES}), step_s)


def precision_advice(device: str, capability: tuple[int, int] | None) -> tuple[str, str] | None:
    """(dtype, why) that fit the device; None for a GPU without tensor cores."""
    if device != "cuda":
        return "bf16", "the CPU runs bf16 matmuls natively"
    if capability is None:
        return "bf16 or fp16", "the device's compute capability is not known"
    if capability[0] >= BF16_SINCE:
        return "bf16", f"sm{capability[0]}{capability[1]} has bf16 tensor cores at twice the TF32 rate, no GradScaler needed"
    if capability[0] >= TENSOR_CORES_SINCE:
        return ("fp16", f"sm{capability[0]}{capability[1]} has fp16 tensor cores but neither bf16 tensor cores nor TF32: "
                "fp16 autocast with a GradScaler")
    return None


def _precision_fix(device: str, capability: tuple[int, int] | None) -> str:
    """The autocast snippet for the device (bf16; fp16 with a GradScaler where bf16 has no tensor cores)."""
    advice = precision_advice(device, capability)
    dtype = advice[0] if advice is not None else "bf16"
    if dtype == "fp16":
        return f"""\
scaler = torch.amp.GradScaler("{device}")   # fp16 needs loss scaling
with torch.autocast("{device}", dtype=torch.float16):
    loss = loss_fn(model(x), y)
scaler.scale(loss).backward()
scaler.step(optimizer)
scaler.update()"""
    head = "" if dtype == "bf16" else (
        "# The compute capability is not known: bf16 on Ampere (sm80) and later,\n"
        "# fp16 with torch.amp.GradScaler on Volta/Turing (sm70/sm75: no bf16 tensor cores, no TF32).\n")
    return head + f"""\
with torch.autocast("{device}", dtype=torch.bfloat16):
    loss = loss_fn(model(x), y)
loss.backward()   # outside autocast; weights and optimizer stay fp32, no GradScaler with bf16
optimizer.step()"""


NO_MIXED_PRECISION = Definition(
    id="NO_MIXED_PRECISION",
    title="matmuls run in fp32 where the device runs 16-bit ones faster",
    threshold=Threshold("MIN_MATMUL_SHARE", 0.05, "matmul time below this share of the step is not worth a precision change"),
    model_change="phase_speed on forward and backward: their matmul time divided by the 16-bit/fp32 ratio",
    estimate=_precision_estimate,
    fix=_precision_fix,
)

# COMM_EXPOSED ---------------------------------------------------------------------------------

# Collectives whose timing DDP and FSDP settings decide (gradient buckets, prefetch).
DATA_PARALLEL = "data_parallel"


def _comm_estimate(model: StepInputs, exposed_s: float, device_s: float | None, step_s: float) -> float:
    """All ``exposed_s`` per step hidden behind compute (an upper bound); ``device_s``, the GPU's
    other work per step, bounds the step from below."""
    return removed_time(model, {"other": exposed_s}, step_s, device_s)


_DATA_PARALLEL_FIX = """\
# DDP: overlap gradient all-reduce with backward, in buckets that start early:
model = DDP(model, device_ids=[local_rank], bucket_cap_mb=25,
            gradient_as_bucket_view=True, static_graph=True)
# fewer bytes per sync: 16-bit gradients (a DDP communication hook)
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
model.register_comm_hook(dist.group.WORLD, default_hooks.bf16_compress_hook)
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


def _comm_fix(data_parallel: bool) -> str:
    """The fix for the dominant kind of traffic: data-parallel collectives (all-reduce,
    reduce-scatter, all-gather) or all-to-all / send-recv."""
    return _DATA_PARALLEL_FIX if data_parallel else _POINT_TO_POINT_FIX


COMM_EXPOSED = Definition(
    id="COMM_EXPOSED",
    title="communication that no computation hides",
    threshold=Threshold("COMM_MIN_SHARE", 0.10,
                        "exposed communication above a tenth of the step means overlap with compute is not "
                        "working, or the network is the bottleneck"),
    model_change="phases_s['other'] loses the exposed communication (all of it hidden: an upper bound)",
    estimate=_comm_estimate,
    fix=_comm_fix,
)

DEFINITIONS: dict[str, Definition] = {d.id: d for d in (SYNC_IN_LOOP, H2D_PAGEABLE, GPU_UNDERUSED,
                                                         NO_MIXED_PRECISION, COMM_EXPOSED)}
