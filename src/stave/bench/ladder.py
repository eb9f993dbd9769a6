"""Climb the optimization ladder: apply each rung on top of the kept ones, keep it only if it helps.

For every candidate the ladder (1) runs the loss check against the fp32 reference, (2) builds the
configuration and times it against the configuration it would replace in interleaved windows,
(3) keeps it when the loss check passes and the gain is outside the measured noise. At the end
the final configuration is timed directly against a fresh baseline (``best_speedup``) and
against itself fed one device batch over and over (``fed_ratio``), and its MFU is computed.
"""

from __future__ import annotations

import logging
import os
import platform
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from stave import __version__
from stave import device as dev
from stave.analyze.stats import median
from stave.bench import mfu as mfu_mod
from stave.bench.code import tune_code
from stave.bench.compare import MIN_GAIN, Comparison, TimingPlan, compare, verdict
from stave.bench.losscheck import INPUT_STAT_TOL, LOSS_CHECK_STEPS, LOSS_NOISE_FACTOR, LOSS_REL_TOL, OUTPUT_REL_TOL, LossChecker
from stave.bench.memory import cpu_batch_cap, saved_activation_bytes
from stave.bench.pipeline import check_batches, image_inputs
from stave.bench.result import (
    BASELINE, KEPT, REVERT_ERROR, REVERT_LOSS, REVERT_SPEED, REVERTED, SKIPPED, LadderResult, RungResult, Trial,
)
from stave.bench.rungs import Context, Plan, Rung, default_rungs
from stave.bench.session import Session, build_model
from stave.bench.settings import RunConfig, describe_changes
from stave.bench.spec import JobSpec
from stave.errors import StaveError
from stave.train.config import TrainConfig

log = logging.getLogger(__name__)

Progress = Callable[[str], None]

# Fields whose change can alter the arithmetic; a candidate equal to the reference in all of them
# computes exactly what the reference computes, and its loss check is skipped as trivially exact.
_NUMERIC_FIELDS = ("uint8", "loader", "precision", "channels_last", "compile", "compile_mode", "optimizer_impl", "cuda_graphs", "cudnn_benchmark")


@dataclass(frozen=True)
class LadderOptions:
    """How the ladder runs. ``quick`` skips compile, caps the batch search and shortens windows."""

    device: str | None = None
    quick: bool = False
    timing: TimingPlan = field(default_factory=TimingPlan)
    seed: int = 0
    loss_steps: int = LOSS_CHECK_STEPS
    loss_tolerance: float = LOSS_REL_TOL
    min_gain: float = MIN_GAIN

    @staticmethod
    def quick_timing(min_steps: int | None = None) -> TimingPlan:
        """Short windows for tests and smoke runs (still 3 per configuration)."""
        return TimingPlan(warmup_steps=1, pairs=3, max_pairs=4, min_steps=min_steps or 1, min_s=0.1)


class _Ladder:
    """State of one climb: sessions by configuration, the loss checker, results so far."""

    def __init__(self, spec: JobSpec, options: LadderOptions, progress: Progress) -> None:
        self.spec = spec
        self.options = options
        self.progress = progress
        self.device = dev.resolve_device(options.device)
        self.machine = machine_facts(self.device)
        torch.manual_seed(options.seed)
        model = spec.model()
        self.initial_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.image_inputs = image_inputs(spec, model)
        self.baseline = RunConfig(
            batch_size=spec.batch_size, num_workers=spec.num_workers, train=TrainConfig(set_to_none=spec.set_to_none)
        )
        self.checker = LossChecker(
            spec, self.device, self.initial_state, self.baseline, self.image_inputs,
            steps=options.loss_steps, tolerance=options.loss_tolerance,
        )
        self.sessions: dict[RunConfig, Session] = {}
        self.x_of: dict[RunConfig, float] = {self.baseline: 1.0}
        self.results: list[RungResult] = []
        self._activation_bytes: dict[tuple[Any, ...], float] = {}

    # -- sessions ------------------------------------------------------------------------------------

    def session(self, config: RunConfig) -> Session:
        if config not in self.sessions:
            self.sessions[config] = Session(
                self.spec, config, self.device, self.initial_state, self.image_inputs and config.train.channels_last,
                seed=self.options.seed,
            )
        return self.sessions[config]

    def drop_sessions(self, keep: set[RunConfig]) -> None:
        for config in [c for c in self.sessions if c not in keep]:
            self.sessions.pop(config).close()
        dev.empty_cache()

    # -- memory cap for the batch-size rung -------------------------------------------------------------

    def batch_cap(self, config: RunConfig) -> int:
        if dev.is_cuda(self.device):
            return 1 << 30  # the GPU probe backs off on out-of-memory instead
        key = (config.train.precision, config.train.channels_last, config.uint8, config.loader)
        if key not in self._activation_bytes:
            size = min(config.batch_size, 8)
            batch = check_batches(self.spec, config.with_changes(batch_size=size), self.device,
                                  self.image_inputs and config.train.channels_last, size, 1)[0]
            model = build_model(self.spec, self.initial_state).to(self.device)
            if config.train.channels_last:
                model = model.to(memory_format=torch.channels_last)
            saved = saved_activation_bytes(model, self.spec.loss, batch[0], batch[1], config.train.precision)
            self._activation_bytes[key] = saved / size
        return cpu_batch_cap(self._activation_bytes[key])

    # -- one candidate -----------------------------------------------------------------------------------

    def numerics_equal_reference(self, config: RunConfig) -> bool:
        mine, ref = config.to_dict(), self.baseline.to_dict()
        return all(mine[k] == ref[k] for k in _NUMERIC_FIELDS)

    def evaluate(self, label: str, changes: dict[str, Any], base: RunConfig) -> Trial:
        candidate = base.with_changes(**changes)
        trial = Trial(label, changes, candidate)
        loss_text = ""
        self.progress(f"  trying {label} ({describe_changes(candidate.changes_from(base))})")
        try:
            if self.numerics_equal_reference(candidate):
                # Same arithmetic and inputs as the reference: identical by construction.
                trial.max_loss_dev, trial.output_dev, trial.input_dev, trial.loss_passed = 0.0, 0.0, 0.0, True
            else:
                check = self.checker.check(candidate)
                trial.max_loss_dev, trial.output_dev, trial.input_dev = check.max_dev, check.output_dev, check.input_dev
                trial.loss_tolerance, trial.loss_passed = check.tolerance, check.passed
                trial.targets_match = check.targets_match
                loss_text = check.describe()
            comparison = compare(self.session(base), self.session(candidate), self.options.timing, self.options.min_gain)
        except (StaveError, RuntimeError, MemoryError, ValueError) as exc:
            self.sessions.pop(candidate, None)
            kind = "out of memory" if dev.is_out_of_memory(exc) else f"{type(exc).__name__}: {exc}"
            trial.reason, trial.revert_kind = f"failed: {kind}"[:300], REVERT_ERROR
            log.info("candidate %s failed", label, exc_info=True)
            return trial
        self._fill(trial, comparison, base)
        keep, why = verdict(comparison, self.options.min_gain)
        if trial.loss_passed is False:
            trial.reason, trial.revert_kind = f"{loss_text}; {comparison.ratio:.2f}x", REVERT_LOSS
        elif keep:
            trial.accepted, trial.reason = True, why
            # The chain of kept ratios: the same settings reached again are measured again.
            self.x_of[candidate] = trial.x_baseline
        else:
            trial.reason, trial.revert_kind = why, REVERT_SPEED
        self.progress(f"    {trial.samples_per_s:.1f} samples/s: {'kept, ' if trial.accepted else ''}{trial.reason}")
        return trial

    def _fill(self, trial: Trial, comparison: Comparison, base: RunConfig) -> None:
        session = self.sessions[trial.config]
        trial.samples_per_s = comparison.b_rate
        trial.window_rates = [w.samples_per_s for w in comparison.b]
        trial.ratio, trial.noise = comparison.ratio, comparison.noise
        trial.x_baseline = self.x_of.get(base, 1.0) * comparison.ratio
        trial.data_wait_share = comparison.b_wait_share
        trial.peak_mem_bytes = comparison.b_peak_mem_bytes
        if trial.config.train.compile and session.first_step_s is not None:
            step_s = median([w.elapsed_ns / 1e9 / w.steps for w in comparison.b])
            trial.compile_s = max(0.0, session.first_step_s - step_s)

    # -- one rung ------------------------------------------------------------------------------------

    def climb(self, rung: Rung, current: RunConfig, ctx: Context) -> tuple[RungResult, RunConfig]:
        plan = rung.plan(ctx, current)
        if plan.skip is not None:
            self.progress(f"{rung.title}: skipped ({plan.skip})")
            return RungResult(rung.name, rung.title, SKIPPED, plan.skip), current
        plan = self._with_pairs(rung, plan)
        self.progress(f"{rung.title}:")
        trials: list[Trial] = []
        chosen: Trial | None = None
        if plan.mode == "grow":
            base = current
            for label, changes in plan.candidates:
                trial = self.evaluate(label, changes, base)
                trials.append(trial)
                if not trial.accepted:
                    break
                chosen, base = trial, trial.config
        elif plan.mode == "largest_fit":
            fitting = self._largest_fit(plan, current)
            if fitting is not None:
                trial = self.evaluate(fitting[0], fitting[1], current)
                trials.append(trial)
                chosen = trial if trial.accepted else None
        else:
            for label, changes in plan.candidates:
                trials.append(self.evaluate(label, changes, current))
            accepted = [t for t in trials if t.accepted]
            chosen = max(accepted, key=lambda t: t.ratio or 0.0) if accepted else None
        if not trials:
            reason = "every candidate ran out of memory"
            return RungResult(rung.name, rung.title, REVERTED, reason, revert_kind=REVERT_ERROR), current
        if chosen is not None:
            reason = chosen.reason if len(trials) == 1 else f"{chosen.label}: {chosen.reason}"
            return RungResult(rung.name, rung.title, KEPT, reason, trials, chosen), chosen.config
        worst = _revert_kind(trials)
        shown = max((t for t in trials if t.ratio is not None), key=lambda t: t.ratio or 0.0, default=trials[0])
        reason = shown.reason if len(trials) == 1 else f"best {shown.label}: {shown.reason}"
        return RungResult(rung.name, rung.title, REVERTED, reason, trials, None, worst), current

    def _with_pairs(self, rung: Rung, plan: Plan) -> Plan:
        extra = []
        for name in rung.pairs_with:
            earlier = next((r for r in self.results if r.name == name), None)
            if earlier is None or earlier.revert_kind != REVERT_SPEED:
                continue
            partner = earlier.shown
            if partner is None:
                continue
            for label, changes in plan.candidates:
                extra.append((f"{label} + {partner.label}", {**changes, **partner.changes}))
        if not extra:
            return plan
        return Plan("best", plan.candidates + tuple(extra))

    def _largest_fit(self, plan: Plan, current: RunConfig) -> tuple[str, dict[str, Any]] | None:
        fitting = None
        for label, changes in plan.candidates:
            candidate = current.with_changes(**changes)
            self.progress(f"  probing {label}")
            try:
                self.session(candidate).run_steps(1)
            except (RuntimeError, MemoryError) as exc:
                if not dev.is_out_of_memory(exc):
                    raise
                self.sessions.pop(candidate).close()
                dev.empty_cache()
                self.progress(f"    out of memory at {label}; backing off")
                break
            fitting = (label, changes)
        return fitting


def _revert_kind(trials: list[Trial]) -> str:
    kinds = {t.revert_kind for t in trials}
    for kind in (REVERT_LOSS, REVERT_ERROR):
        if kind in kinds and REVERT_SPEED not in kinds:
            return kind
    return REVERT_SPEED if REVERT_SPEED in kinds else (kinds.pop() or REVERT_ERROR)


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


def run_ladder(
    spec: JobSpec,
    options: LadderOptions | None = None,
    rungs: list[Rung] | None = None,
    progress: Progress | None = None,
) -> LadderResult:
    """Climb ``rungs`` (default: :func:`~stave.bench.rungs.default_rungs`) for ``spec``."""
    options = options or LadderOptions()
    say = progress or (lambda _msg: None)
    started = time.perf_counter()
    ladder = _Ladder(spec, options, say)
    ctx = Context(spec, ladder.device, options.quick, ladder.image_inputs, ladder.batch_cap)
    current = ladder.baseline
    ladder.results.append(RungResult("baseline", "baseline", BASELINE, "the job as written"))
    try:
        for rung in rungs if rungs is not None else default_rungs(spec):
            result, current = ladder.climb(rung, current, ctx)
            ladder.results.append(result)
            ctx.results[rung.name] = result
            ladder.drop_sessions({current})
        return _finish(ladder, current, started)
    finally:
        ladder.drop_sessions(set())


def _finish(ladder: _Ladder, final: RunConfig, started: float) -> LadderResult:
    spec, options, say = ladder.spec, ladder.options, ladder.progress
    say("final configuration against a fresh baseline:")
    fresh = Session(spec, ladder.baseline, ladder.device, ladder.initial_state, False, seed=options.seed + 1)
    final_session = ladder.session(final)
    try:
        direct = compare(fresh, final_session, options.timing)
    finally:
        fresh.close()
    say(f"  {direct.ratio:.2f}x (±{direct.noise:.0%})")
    baseline_row = ladder.results[0]
    baseline_row.trials.append(Trial("baseline", {}, ladder.baseline, samples_per_s=direct.a_rate,
                                     ratio=1.0, x_baseline=1.0, data_wait_share=median([w.wait_share for w in direct.a]),
                                     peak_mem_bytes=max((w.peak_mem_bytes or 0 for w in direct.a), default=None) or None,
                                     max_loss_dev=0.0, output_dev=0.0, input_dev=0.0, loss_passed=True, accepted=True,
                                     window_rates=[w.samples_per_s for w in direct.a]))
    baseline_row.chosen = baseline_row.trials[0]

    say("final configuration against the same step fed one device batch:")
    batch = final_session.sample_batch()
    fed_session = Session(spec, final, ladder.device, ladder.initial_state,
                          ladder.image_inputs and final.train.channels_last, seed=options.seed, fed_batch=batch)
    try:
        fed_cmp = compare(fed_session, final_session, options.timing)
    finally:
        fed_session.close()
    say(f"  fed ratio {fed_cmp.ratio:.3f} (±{fed_cmp.noise:.1%})")

    flops_model = build_model(spec, ladder.initial_state).to(ladder.device)
    if final.train.channels_last and ladder.image_inputs:
        flops_model = flops_model.to(memory_format=torch.channels_last)
    flops = mfu_mod.step_flops(flops_model, spec.loss, batch[0], batch[1], final.train.precision)
    per_sample = flops / final.batch_size if flops else None
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
    }
    chain = ladder.x_of.get(final, 1.0)
    code = tune_code(spec, ladder.baseline, final, ladder.image_inputs)
    return LadderResult(
        workload=spec.name,
        description=spec.description,
        unit=spec.unit,
        items_per_sample=spec.items_per_sample,
        machine={**ladder.machine, "load_avg_1m_end": machine_facts(ladder.device)["load_avg_1m"]},
        options={
            "quick": options.quick, "seed": options.seed, "warmup_steps": options.timing.warmup_steps,
            "windows_per_config": options.timing.pairs, "min_window_steps": options.timing.min_steps,
            "min_window_s": options.timing.min_s, "min_gain": options.min_gain,
        },
        baseline=ladder.baseline,
        final=final,
        rungs=ladder.results,
        baseline_samples_per_s=base_rate,
        final_samples_per_s=final_rate,
        best_speedup=direct.ratio,
        best_speedup_noise=direct.noise,
        chain_speedup=chain,
        fed={"ratio": fed_cmp.ratio, "noise": fed_cmp.noise, "real_samples_per_s": fed_cmp.b_rate,
             "fed_samples_per_s": fed_cmp.a_rate},
        mfu=mfu,
        loss_check={
            "steps": options.loss_steps, "tolerance": options.loss_tolerance, "noise_factor": LOSS_NOISE_FACTOR,
            "output_tolerance": OUTPUT_REL_TOL, "input_tolerance": INPUT_STAT_TOL,
            "metric": "losses: max |loss - fp32| / |fp32| over the first steps (tolerance: max(tolerance, noise_factor x "
                      "the deviation bf16-rounded weights cause)); inputs: channel mean/sd shift in sds; "
                      "outputs: ||out - fp32 out|| / ||fp32 out|| on the first batch",
        },
        code=code,
        duration_s=time.perf_counter() - started,
    )
