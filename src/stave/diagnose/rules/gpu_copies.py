"""H2D_PAGEABLE and H2D_BLOCKING: how the batch travels from host memory to the GPU.

A copy from pageable memory cannot be a direct DMA: the driver stages it through its own pinned
bounce buffer, one chunk at a time, and the call returns only when done, whatever
``non_blocking`` says. A copy from pinned memory with ``non_blocking=True`` is queued on a stream
and overlaps with compute; issued on a side stream one batch ahead (a prefetcher) it leaves the
step's critical path entirely.
"""

from __future__ import annotations

from stave.analyze.pipeline import main_loader
from stave.analyze.step_inputs import step_inputs
from stave.analyze.step_model import phase_s
from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.inputs import DoctorInput
from stave.diagnose.rules._helpers import (
    REPORT_MIN_SPEEDUP,
    dataloader_call,
    is_gpu,
    make_finding,
    phase_lines,
    saving_speedup,
)
from stave.diagnose.shared_findings import H2D_PAGEABLE, PINNED_COPY_SPEEDUP, step_only_inputs
from stave.measure.pipeline import CopyStat

# Copies below this share of the step cannot reach the warning level (the shared definition's threshold).
H2D_MIN_SHARE = H2D_PAGEABLE.threshold.value


def _h2d(inp: DoctorInput) -> list[CopyStat]:
    return [c for c in inp.record.copies if c.direction == "h2d" and c.nbytes > 0]


@rule("H2D_PAGEABLE", kind="doctor")
def h2d_pageable(inp: DoctorInput) -> Finding | None:
    """Batches are copied to the GPU from pageable (not pinned) host memory."""
    record, summary = inp.record, inp.summary
    copies = _h2d(inp)
    if not is_gpu(record) or not copies or summary.breakdown.get("h2d", 0.0) < H2D_MIN_SHARE:
        return None
    total = sum(c.nbytes for c in copies)
    pageable = sum(c.nbytes for c in copies if not c.pinned)
    if pageable == 0:
        return None
    frac = pageable / total
    h2d = phase_s(summary, "h2d")
    t = summary.step_time_median_s
    model = step_inputs(record, summary) or step_only_inputs(t)
    measured = record.probes.pinned_copy_speedup
    est = H2D_PAGEABLE.estimate(model, pageable_copy_s=h2d * frac, step_s=t, pinned_speedup=measured)
    if est < REPORT_MIN_SPEEDUP:
        return None
    loader = main_loader(record)
    call = dataloader_call(loader, pin_memory=True) if loader is not None else None
    return make_finding(
        "H2D_PAGEABLE",
        est,
        f"{frac:.0%} of the bytes copied to the GPU come from pageable memory ({summary.breakdown['h2d']:.0%} of the step)",
        {
            "h2d_share": summary.breakdown["h2d"],
            "h2d_s": h2d,
            "h2d_bytes_per_step": summary.h2d_bytes_per_step,
            "pageable_bytes_share": frac,
            "h2d_gb_per_s": (summary.h2d_bytes_per_step / h2d / 1e9) if h2d > 0 else None,
            "pinned_copy_speedup": measured if measured is not None else PINNED_COPY_SPEEDUP,
            "pinned_copy_speedup_source": "probe" if measured is not None else "assumed",
            "pinned_copy_probe_bytes": record.probes.pinned_copy_probe_bytes,
        },
        H2D_PAGEABLE.fix(call),
        explanation=("Estimate: the pageable share of the copy time divided by the pinned probe's "
                     f"pageable/pinned copy time ({measured:.1f}x here)." if measured is not None else
                     "Estimate: the pageable share of the copy time divided by "
                     f"{PINNED_COPY_SPEEDUP:g} (the pinned probe did not run)."),
        lines=phase_lines(record, "h2d"),
    )


@rule("H2D_BLOCKING", kind="doctor")
def h2d_blocking(inp: DoctorInput) -> Finding | None:
    """Copies to the GPU block the step instead of overlapping with compute."""
    record, summary = inp.record, inp.summary
    copies = _h2d(inp)
    if not is_gpu(record) or not copies or summary.breakdown.get("h2d", 0.0) < H2D_MIN_SHARE:
        return None
    total = sum(c.nbytes for c in copies)
    blocking = sum(c.nbytes for c in copies if not (c.pinned and c.non_blocking))
    if blocking == 0:
        return None
    frac = blocking / total
    h2d = phase_s(summary, "h2d")
    t = summary.step_time_median_s
    compute = t - h2d - phase_s(summary, "data_wait")
    # Prefetched on a side stream the copy hides behind the previous batch's compute, as long as
    # there is at least as much compute to hide behind.
    hidden = min(h2d * frac, max(compute, 0.0))
    est = saving_speedup(inp, {"h2d": hidden}, t)
    if est < REPORT_MIN_SPEEDUP:
        return None
    return make_finding(
        "H2D_BLOCKING",
        est,
        f"Copies to the GPU ({summary.breakdown['h2d']:.0%} of the step) run in line with the compute",
        {
            "h2d_share": summary.breakdown["h2d"],
            "h2d_s": h2d,
            "blocking_bytes_share": frac,
            "copies": [
                {"dtype": c.dtype, "pinned": c.pinned, "non_blocking": c.non_blocking, "bytes": c.nbytes, "count": c.count}
                for c in copies
            ],
        },
        "# Copy batch N+1 on a side stream while batch N computes (pinned, non_blocking):\n"
        "loader = stave.data.DeviceLoader(loader, device)\n"
        "for x, y in loader:   # already on the device\n"
        "    ...",
        explanation="Estimate: the blocking copies' time hidden behind the step's compute.",
        lines=phase_lines(record, "h2d"),
    )
