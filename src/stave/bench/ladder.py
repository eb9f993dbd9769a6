"""Climb the optimization ladder: apply each rung on top of the kept ones, keep it only if it helps.

For every candidate the ladder (1) runs the loss check against the fp32 reference, (2) builds the
configuration and times it against the configuration it would replace in interleaved windows,
(3) keeps it when the loss check passes and the gain is outside the measured noise. At the end
the final configuration is timed directly against a fresh baseline (``best_speedup``) and
against itself fed one device batch over and over (``fed_ratio``), and its MFU is computed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from stave import device as dev
from stave.analyze.stats import median
from stave.bench import compare as cmp
from stave.bench.compare import MIN_GAIN, Comparison, TimingPlan, verdict
from stave.bench.final import finish, machine_facts, partial_result
from stave.bench.losscheck import LOSS_CHECK_STEPS, LOSS_REL_TOL, LossChecker
from stave.bench.memory import cpu_batch_cap, saved_activation_bytes
from stave.bench.pipeline import check_batches, image_inputs
from stave.bench.result import (
    BASELINE,
    KEPT,
    REVERT_ERROR,
    REVERT_LOSS,
    REVERT_SPEED,
    REVERTED,
    SKIPPED,
    LadderIncomplete,
    LadderResult,
    RungResult,
    Trial,
)
from stave.bench.rungs import Context, Plan, Rung, default_rungs
from stave.bench.session import Session, build_model
from stave.bench.settings import RunConfig, describe_changes
from stave.bench.spec import JobSpec
from stave.errors import StaveError
from stave.train.config import TrainConfig

log = logging.getLogger(__name__)

Progress = Callable[[str], None]

# A grow search (worker counts, batch sizes) stops after this many non-gains in a row, not at the
# first: one flat step can hide a gain at the next (on the seed workload batch 128 measured a flat
# 1.07x and was reverted, while 256 measured 1.18x), and two misses in a row rarely turn around.
GROW_PATIENCE = 2

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


class Climb:
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
            spec,
            self.device,
            self.initial_state,
            self.baseline,
            self.image_inputs,
            steps=options.loss_steps,
            tolerance=options.loss_tolerance,
        )
        self.sessions: dict[RunConfig, Session] = {}
        self.x_of: dict[RunConfig, float] = {self.baseline: 1.0}
        self.results: list[RungResult] = []
        self._activation_bytes: dict[tuple[Any, ...], float] = {}

    # -- sessions ------------------------------------------------------------------------------------

    def session(self, config: RunConfig) -> Session:
        if config not in self.sessions:
            self.sessions[config] = Session(
                self.spec,
                config,
                self.device,
                self.initial_state,
                self.image_inputs and config.train.channels_last,
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
            batch = check_batches(
                self.spec,
                config.with_changes(batch_size=size),
                self.device,
                self.image_inputs and config.train.channels_last,
                size,
                1,
            )[0]
            model = build_model(self.spec, self.initial_state).to(self.device)
            if config.train.channels_last:
                model = model.to(memory_format=torch.channels_last)
            saved = saved_activation_bytes(model, self.spec.loss, batch[0], batch[1], config.train.precision)
            self._activation_bytes[key] = saved / size
        return cpu_batch_cap(self._activation_bytes[key])

    # -- one candidate -----------------------------------------------------------------------------------

    def numerics_equal_reference(self, config: RunConfig) -> bool:
        """A candidate equal to the reference in every setting that can alter the arithmetic (declared
        with the setting: RunConfig.numeric_settings) computes exactly what the reference computes,
        and its loss check is skipped as trivially exact."""
        mine, ref = config.to_dict(), self.baseline.to_dict()
        return all(mine.get(k) == ref.get(k) for k in RunConfig.numeric_settings())

    def evaluate(self, label: str, changes: dict[str, Any], base: RunConfig) -> Trial:
        candidate = base.with_changes(**changes)
        trial = Trial(label, changes, candidate)
        loss_text = ""
        first_check_step_s: float | None = None
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
                first_check_step_s = check.first_step_s
                loss_text = check.describe()
            comparison = cmp.compare(
                self.session(base), self.session(candidate), self.options.timing, self.options.min_gain
            )
        except (StaveError, RuntimeError, MemoryError, ValueError) as exc:
            self.sessions.pop(candidate, None)
            kind = "out of memory" if dev.is_out_of_memory(exc) else f"{type(exc).__name__}: {exc}"
            trial.reason, trial.revert_kind = f"failed: {kind}"[:300], REVERT_ERROR
            log.info("candidate %s failed", label, exc_info=True)
            return trial
        self._fill(trial, comparison, base, first_check_step_s)
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

    def _fill(self, trial: Trial, comparison: Comparison, base: RunConfig, first_check_step_s: float | None) -> None:
        session = self.sessions[trial.config]
        trial.samples_per_s = comparison.b_rate
        trial.window_rates = [w.samples_per_s for w in comparison.b]
        trial.ratio, trial.noise = comparison.ratio, comparison.noise
        trial.x_baseline = self.x_of.get(base, 1.0) * comparison.ratio
        trial.data_wait_share = comparison.b_wait_share
        trial.peak_mem_bytes = comparison.b_peak_mem_bytes
        if trial.config.train.compile:
            # Compilation happens on the first step of whichever runs first (the loss check, or
            # the session when the check was skipped); later builds hit inductor's caches.
            step_s = median([w.elapsed_ns / 1e9 / w.steps for w in comparison.b])
            first = max(s for s in (session.first_step_s, first_check_step_s, 0.0) if s is not None)
            trial.compile_s = max(0.0, first - step_s)

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
            chosen = self._grow(plan, current, trials)
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

    def _grow(self, plan: Plan, current: RunConfig, trials: list[Trial]) -> Trial | None:
        """:func:`grow_search` over ``plan``; a candidate that did not help gives back its session."""

        def missed(base: RunConfig) -> None:
            # The candidate's session (its model, its workers) is not needed by the next candidate.
            self.drop_sessions({base, current})

        return grow_search(plan, current, self.evaluate, trials, self.progress, missed)

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


def grow_search(
    plan: Plan,
    current: Any,
    evaluate: Callable[[str, dict[str, Any], Any], Trial],
    trials: list[Trial],
    progress: Progress,
    missed: Callable[[Any], None] | None = None,
) -> Trial | None:
    """Candidates in order, each evaluated against the best so far; stop after ``GROW_PATIENCE``
    non-gains in a row, or at the first failure. Appends every trial to ``trials``; returns the
    last kept one. ``missed(base)`` runs after each non-gain (to free what the candidate held)."""
    chosen: Trial | None = None
    base = current
    misses = 0
    for label, changes in plan.candidates:
        trial = evaluate(label, changes, base)
        trials.append(trial)
        if trial.accepted:
            chosen, base, misses = trial, trial.config, 0
            continue
        if trial.revert_kind in (REVERT_ERROR, SKIPPED):
            # A larger batch or more workers fail the same way (out of memory, a worker crash), and a
            # setting the job does not use (a script without a DataLoader) is not used at any value.
            break
        misses += 1
        if missed is not None:
            missed(base)
        if misses >= GROW_PATIENCE:
            break
        progress(f"    no gain at {label}; trying one step further")
    return chosen


def _revert_kind(trials: list[Trial]) -> str:
    kinds = {t.revert_kind for t in trials}
    for kind in (REVERT_LOSS, REVERT_ERROR):
        if kind in kinds and REVERT_SPEED not in kinds:
            return kind
    return REVERT_SPEED if REVERT_SPEED in kinds else (kinds.pop() or REVERT_ERROR)


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
    ladder = Climb(spec, options, say)
    ctx = Context(spec, ladder.device, options.quick, ladder.image_inputs, ladder.batch_cap)
    current = ladder.baseline
    load, cores = ladder.machine.get("load_avg_1m"), ladder.machine.get("cores_usable") or 1
    if load is not None and load > cores:
        say(f"note: load average {load:.1f} on {cores} usable cores: other work competes, ratios will be noisy")
    ladder.results.append(RungResult("baseline", "baseline", BASELINE, "the job as written"))
    try:
        for rung in rungs if rungs is not None else default_rungs(spec):
            result, current = ladder.climb(rung, current, ctx)
            ladder.results.append(result)
            ctx.results[rung.name] = result
            ladder.drop_sessions({current})
        return finish(ladder, current, started)
    except (KeyboardInterrupt, StaveError, RuntimeError, MemoryError) as exc:
        # Minutes of measurements must not vanish with one failure or a Ctrl-C: hand them over.
        reason = "interrupted (Ctrl-C)" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
        raise LadderIncomplete(partial_result(ladder, current, started, reason), exc) from exc
    finally:
        ladder.drop_sessions(set())
