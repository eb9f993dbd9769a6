"""Small pieces the doctor's rules share: building a Finding, tidy evidence, code snippets."""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

from stave.analyze.hotlines import hot_lines, loop_holds_phase
from stave.analyze.breakdown import summarize_steps
from stave.analyze.step_inputs import step_inputs, steps_at_free_cores
from stave.analyze.step_model import ModelEstimate, estimate, phase_s, speedup, step_time, without_phase_time
from stave.diagnose.finding import Finding, severity_for_speedup
from stave.diagnose.inputs import DoctorInput
from stave.measure.config import LoaderInfo
from stave.measure.record import RunRecord
from stave.measure.serialize import json_safe

# A speed finding below this estimate is not reported: on a shared machine run-to-run noise is
# about this large, so the user could not confirm the gain, and the report would fill with lint.
REPORT_MIN_SPEEDUP = 1.05
# A source line is worth naming when it holds at least this share of the phase's samples; below
# it, a line is one of many and changing it alone would not move the number.
LINE_MIN_SHARE = 0.10
# Evidence numbers keep this many significant digits: enough to recompute the estimate, few
# enough to read.
EVIDENCE_DIGITS = 4
# Fewer stack samples in a phase than this (0.2 s at 50 Hz) cannot say which line holds the time:
# a line's share would be off by more than 15% either way.
MIN_STACK_SAMPLES = 10
# A step's loss and metrics issue tens of ops between the phases (cross_entropy is about four, an
# accuracy about five, each .item() one); more than this many are not such fixed bookkeeping, so
# with at least one op per sample of the batch they come from a loop over the batch's elements.
BOOKKEEPING_OPS_MAX = 64


def tidy(value: Any) -> Any:
    """Evidence as JSON: floats rounded to :data:`EVIDENCE_DIGITS` significant digits, recursively;
    NaN/inf become None (:func:`stave.measure.serialize.json_safe`)."""
    return json_safe(value, digits=EVIDENCE_DIGITS)


def make_finding(
    finding_id: str,
    est_speedup: float,
    title: str,
    evidence: dict[str, Any],
    fix: str,
    explanation: str = "",
    lines: Iterable[str] = (),
    severity: str | None = None,
    source: str = "doctor",
) -> Finding:
    """A Finding with severity from the estimate (unless a risk finding passes its own).

    ``source`` names the analysis ("doctor", "trace"), so every rule module can build its findings here.
    """
    est = round(max(1.0, float(est_speedup)), 3)
    priced = est_speedup if isinstance(est_speedup, ModelEstimate) else None
    return Finding(
        id=finding_id,
        severity=severity or severity_for_speedup(est),
        est_speedup=est,
        title=title,
        evidence=tidy(evidence),
        fix=fix.strip("\n"),
        explanation=explanation,
        lines=list(lines),
        source=source,
        model_change=(priced.before, priced.after, priced.measured_step_s) if priced is not None else None,
    )


def is_gpu(record: RunRecord) -> bool:
    """True when the job computed on a CUDA device."""
    return record.config.device_type == "cuda"


def counted_indices(record: RunRecord) -> list[int]:
    """Indices of the steps that enter the statistics."""
    return [s.index for s in record.counted_steps()]


def phase_lines(record: RunRecord, phase: str | None, limit: int = 3) -> list[str]:
    """``path:line`` of the user lines holding at least :data:`LINE_MIN_SHARE` of a phase's samples."""
    lines = hot_lines(record.stacks, counted_indices(record), phase, limit=limit)
    return [h.label for h in lines if h.share >= LINE_MIN_SHARE]


def dataloader_call(loader: LoaderInfo, **changes: Any) -> str:
    """A ``DataLoader(...)`` call with the loader's own settings and ``changes`` applied.

    Only settings that differ from torch's defaults (or are changed) are written, so the snippet
    reads like code a person would write.
    """
    args: dict[str, Any] = {"batch_size": loader.batch_size}
    if "shuffle" not in changes and loader.sampler_type == "RandomSampler":
        args["shuffle"] = True
    args["num_workers"] = loader.num_workers
    if loader.pin_memory:
        args["pin_memory"] = True
    if loader.persistent_workers:
        args["persistent_workers"] = True
    if loader.prefetch_factor not in (None, 2):
        args["prefetch_factor"] = loader.prefetch_factor
    if loader.drop_last:
        args["drop_last"] = True
    if loader.multiprocessing_context not in (None, "fork"):
        args["multiprocessing_context"] = loader.multiprocessing_context
    args.update(changes)
    if args.get("num_workers", 0) == 0:
        for key in ("persistent_workers", "prefetch_factor", "multiprocessing_context"):
            args.pop(key, None)
    rendered = ", ".join(f"{k}={v!r}" for k, v in args.items() if v is not None)
    return f"loader = DataLoader(dataset, {rendered})"


def saving_speedup(inp: DoctorInput, saved_s: dict[str, float], step_s: float,
                   device_s: float | None = None) -> float:
    """``est_speedup`` of a fix that removes ``saved_s`` seconds from the named phases, priced by
    the step model (``step_s``: the measured step statistic the rule's page names; ``device_s``: the
    GPU's busy time per step where the rule measured it, which bounds the step from below).

    Without model inputs (no counted step) it is the closed form ``T / (T - saved)``.

    The seconds are the measured step's (a median phase, or a phase's share of the median step);
    the model holds mean phases and is matched to ``step_s`` by scaling when it explains more than
    that (:func:`~stave.analyze.step_model.estimate`). So the saving is scaled the same way first:
    a fix that removes a fifth of the measured step removes a fifth of the model's. Taken as they
    are, the seconds would leave the mean's excess over the median (a loop's garbage collections,
    jitter) in the fixed step.
    """
    model = step_inputs(inp.record, inp.summary)
    if model is None:
        return speedup(step_s, step_s - sum(max(v, 0.0) for v in saved_s.values()))
    if device_s is not None:
        model = model.changed(device_s=device_s)
    t_model = step_time(model).step_s
    scale = max(1.0, t_model / step_s) if step_s > 0 else 1.0
    return estimate(model, without_phase_time(model, {p: s * scale for p, s in saved_s.items()}), step_s)


def spread_saving(inp: DoctorInput, phases: tuple[str, ...], saved_s: float) -> dict[str, float]:
    """``saved_s`` seconds taken off ``phases`` in proportion to each one's time in a median step
    (a fix that shrinks work spread over several phases, e.g. fewer tokens in forward and backward)."""
    times = {p: phase_s(inp.summary, p) for p in phases}
    total = sum(times.values())
    if total <= 0:
        return {}
    return {p: saved_s * t / total for p, t in times.items()}


def micro_batches(record: RunRecord) -> int:
    """Micro-batches per optimizer step (gradient accumulation), the median over the counted steps.

    A micro-batch is a backward pass over a batch of its own: backward passes per step, but no more
    than the loader batches the step fetched where it fetched any (a gradient penalty's
    ``autograd.grad``, one backward per loss, or SAM's second pass run several backward passes over
    one batch). With several optimizers in a step (a GAN's discriminator and generator) the backward
    passes belong to different models: 1."""
    if len(record.config.optimizers) > 1:
        return 1
    steps = record.counted_steps()
    calls = sorted(s.backward_calls if s.data_fetches == 0 else min(s.backward_calls, s.data_fetches)
                   for s in steps)
    return max(1, calls[len(calls) // 2]) if calls else 1


def loop_over_batch(inp: DoctorInput) -> bool:
    """True when the ops issued between the phases come from a loop over the batch's elements.

    Their count per micro-batch must be beyond fixed bookkeeping (:data:`BOOKKEEPING_OPS_MAX`) and at
    least one per sample of the (micro-)batch; where the stack samples can say (:data:`MIN_STACK_SAMPLES`), most
    of that time must also sit on lines inside a per-element loop of the user's code.
    """
    record = inp.record
    # Under gradient accumulation the loss and its bookkeeping run once per micro-batch.
    ops = (record.config.aten_ops_by_phase or {}).get("other", 0) / micro_batches(record)
    micro = max(1, round(inp.summary.samples_per_step / micro_batches(record)))
    if ops < max(micro, BOOKKEEPING_OPS_MAX):
        return False
    steps = counted_indices(record)
    if record.stacks.sample_count(steps, "other") < MIN_STACK_SAMPLES:
        return True
    return loop_holds_phase(record.stacks, steps, "other", LINE_MIN_SHARE)


def at_free_cores(inp: DoctorInput) -> DoctorInput:
    """Beside busy processes that left fewer free cores than the intra-op pool's threads, the run as
    its compute would go with the pool at the free cores (MACHINE_BUSY's busy-threads probe,
    :func:`stave.analyze.step_inputs.steps_at_free_cores`); the run itself elsewhere. Each op's wait
    at its barrier for the thread sharing a core with them is MACHINE_BUSY's cost (one cause, one
    finding); left in, it made every op look heavy (a batch-2 MLP: 24 backward ops took 6.8 ms beside
    a busy loop, 0.5 ms alone, and SMALL_BATCH went unnamed)."""
    model = step_inputs(inp.record, inp.summary)
    steps = steps_at_free_cores(inp.record, inp.summary, model.serial_s) if model is not None else None
    if steps is None:
        return inp
    return DoctorInput(dataclasses.replace(inp.record, steps=steps), summarize_steps(steps))
