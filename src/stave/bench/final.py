"""The end of a climb: the final configuration timed against a fresh baseline and against itself fed
one device batch (the fed ratio), its FLOPs and MFU, and the result object.
"""

from __future__ import annotations

import os
import platform
import time
from typing import Any, Callable, Protocol

import torch

from stave import __version__
from stave import device as dev
from stave.analyze.stats import median
from stave.bench import compare as cmp
from stave.bench import mfu as mfu_mod
from stave.bench.code import tune_code
from stave.bench.losscheck import INPUT_STAT_TOL, LOSS_NOISE_FACTOR, OUTPUT_REL_TOL
from stave.bench.result import LadderResult, RungResult, Trial
from stave.bench.session import Session, build_model
from stave.bench.settings import RunConfig
from stave.bench.spec import JobSpec
from stave.errors import StaveError


class Climb(Protocol):
    """What the end of a climb reads of :class:`stave.bench.ladder.Climb` (declared here, so this
    module does not import the ladder that imports it)."""

    spec: JobSpec
    options: Any
    progress: Callable[[str], None]
    device: torch.device
    machine: dict[str, Any]
    initial_state: dict[str, torch.Tensor]
    image_inputs: bool
    baseline: RunConfig
    x_of: dict[RunConfig, float]
    results: list[RungResult]

    def session(self, config: RunConfig) -> Session: ...


def machine_facts(device: torch.device) -> dict[str, Any]:
    """Where the numbers were measured (with the load average: a busy machine makes them noisy)."""
    info = dev.describe_device(device)
    return {
        "load_avg_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "device": info.type,
        "device_name": info.name,
        "cores_usable": dev.usable_cores(),
        "torch_threads": torch.get_num_threads(),
        "bf16_native": info.bf16_native,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "stave": __version__,
        "platform": platform.platform(),
    }


def finish(ladder: "Climb", final: RunConfig, started: float) -> LadderResult:
    """Time the final configuration against a fresh baseline and its fed twin, count FLOPs, build the result."""
    spec, options, say = ladder.spec, ladder.options, ladder.progress
    say("final configuration against a fresh baseline:")
    fresh = Session(spec, ladder.baseline, ladder.device, ladder.initial_state, False, seed=options.seed + 1)
    final_session = ladder.session(final)
    try:
        direct = cmp.compare(fresh, final_session, options.timing)
    finally:
        fresh.close()
    say(f"  {direct.ratio:.2f}x (±{direct.noise:.0%})")
    baseline_row = ladder.results[0]
    baseline_row.trials.append(
        Trial(
            "baseline",
            {},
            ladder.baseline,
            samples_per_s=direct.a_rate,
            ratio=1.0,
            x_baseline=1.0,
            data_wait_share=median([w.wait_share for w in direct.a]),
            peak_mem_bytes=max((w.peak_mem_bytes or 0 for w in direct.a), default=None) or None,
            max_loss_dev=0.0,
            output_dev=0.0,
            input_dev=0.0,
            loss_passed=True,
            accepted=True,
            window_rates=[w.samples_per_s for w in direct.a],
        )
    )
    baseline_row.chosen = baseline_row.trials[0]

    say("final configuration against the same step fed one device batch:")
    batch = final_session.sample_batch()
    notes: list[str] = []
    try:
        fed = _fed_comparison(ladder, final, final_session, batch)
        say(f"  fed ratio {fed['ratio']:.3f} (±{fed['noise']:.1%})")
    except (StaveError, RuntimeError, MemoryError) as exc:
        # The ladder's own measurements stand; only the fed twin is missing.
        fed = dict(NO_FED)
        notes.append(f"the fed comparison failed: {type(exc).__name__}: {exc}")
        say(f"  failed: {exc}")

    flops_model = build_model(spec, ladder.initial_state).to(ladder.device)
    if final.train.channels_last and ladder.image_inputs:
        flops_model = flops_model.to(memory_format=torch.channels_last)
    counted = mfu_mod.step_flops(flops_model, spec.loss, batch[0], batch[1], final.train.precision)
    # A dense op the counter cannot see (an LSTM kernel) makes the total a fraction of the work.
    per_sample = counted.flops / final.batch_size if counted.flops and not counted.uncounted_ops else None
    peak_final = mfu_mod.peak_flops(ladder.device, final.train.precision)
    peak_base = mfu_mod.peak_flops(ladder.device, ladder.baseline.train.precision)
    base_rate, final_rate = direct.a_rate, direct.b_rate
    mfu = {
        "flops_per_sample": per_sample,
        "flops_per_item": per_sample / spec.items_per_sample if per_sample and spec.unit == "tokens" else per_sample,
        "baseline": mfu_mod.mfu(per_sample, base_rate, peak_base),
        "final": mfu_mod.mfu(per_sample, final_rate, peak_final),
        "baseline_peak_flops_per_s": peak_base.flops_per_s,
        "final_peak_flops_per_s": peak_final.flops_per_s,
        "baseline_peak_dtype": peak_base.dtype,
        "final_peak_dtype": peak_final.dtype,
        "peak_source": peak_final.source,
        "uncounted_ops": list(counted.uncounted_ops),
    }
    return _result(
        ladder,
        final,
        started,
        baseline_samples_per_s=base_rate,
        final_samples_per_s=final_rate,
        best_speedup=direct.ratio,
        best_speedup_noise=direct.noise,
        fed=fed,
        mfu=mfu,
        notes=notes,
    )


# The fed part of a result whose fed comparison did not run.
NO_FED: dict[str, Any] = {"ratio": None, "noise": None, "real_samples_per_s": None, "fed_samples_per_s": None}


def _fed_comparison(ladder: "Climb", final: RunConfig, final_session: Session, batch: Any) -> dict[str, Any]:
    """The final configuration against itself fed ``batch`` over and over (the fed ratio)."""
    fed_session = Session(
        ladder.spec,
        final,
        ladder.device,
        ladder.initial_state,
        ladder.image_inputs and final.train.channels_last,
        seed=ladder.options.seed,
        fed_batch=batch,
    )
    try:
        fed_cmp = cmp.compare(fed_session, final_session, ladder.options.timing)
    finally:
        fed_session.close()
    return {
        "ratio": fed_cmp.ratio,
        "noise": fed_cmp.noise,
        "real_samples_per_s": fed_cmp.b_rate,
        "fed_samples_per_s": fed_cmp.a_rate,
    }


def partial_result(ladder: "Climb", current: RunConfig, started: float, reason: str) -> LadderResult:
    """What was measured before the climb stopped: the rungs so far, the configuration kept so far.

    No fresh-baseline or fed comparison ran, so those numbers are None; the rungs' own ratios (and
    their product, ``chain_speedup``) are real measurements.
    """
    mfu: dict[str, Any] = {"flops_per_sample": None, "baseline": None, "final": None, "uncounted_ops": []}
    return _result(
        ladder,
        current,
        started,
        baseline_samples_per_s=None,
        final_samples_per_s=None,
        best_speedup=None,
        best_speedup_noise=None,
        fed=dict(NO_FED),
        mfu=mfu,
        notes=[f"incomplete: {reason}"],
        incomplete=reason,
    )


def _result(ladder: "Climb", final: RunConfig, started: float, **measured: Any) -> LadderResult:
    spec, options = ladder.spec, ladder.options
    return LadderResult(
        workload=spec.name,
        description=spec.description,
        unit=spec.unit,
        items_per_sample=spec.items_per_sample,
        machine={**ladder.machine, "load_avg_1m_end": machine_facts(ladder.device)["load_avg_1m"]},
        options={
            "quick": options.quick,
            "seed": options.seed,
            "warmup_steps": options.timing.warmup_steps,
            "windows_per_config": options.timing.pairs,
            "min_window_steps": options.timing.min_steps,
            "min_window_s": options.timing.min_s,
            "min_gain": options.min_gain,
        },
        baseline=ladder.baseline,
        final=final,
        rungs=ladder.results,
        chain_speedup=ladder.x_of.get(final, 1.0),
        loss_check={
            "steps": options.loss_steps,
            "tolerance": options.loss_tolerance,
            "noise_factor": LOSS_NOISE_FACTOR,
            "output_tolerance": OUTPUT_REL_TOL,
            "input_tolerance": INPUT_STAT_TOL,
            "metric": "losses: max |loss - fp32| / |fp32| over the first steps "
            "(tolerance: max(tolerance, noise_factor x "
            "the deviation bf16-rounded weights cause)); inputs: channel mean/sd shift in sds; "
            "outputs: ||out - fp32 out|| / ||fp32 out|| on the first batch",
        },
        code=tune_code(spec, ladder.baseline, final, ladder.image_inputs),
        duration_s=time.perf_counter() - started,
        **measured,
    )
