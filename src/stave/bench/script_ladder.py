"""Climb the ladder on the user's unmodified script: each rung's fix injected, kept only if it helps.

A configuration is the set of fixes injected (:class:`~stave.bench.script_rungs.ScriptConfig`). Every
timed window is one run of the script in its own child process (:func:`stave.inject.launch.run_child`),
``warmup + steps`` steps long, its rate taken over the ``steps`` after the warm-up (``--steps``
bounds each window). A candidate (the kept fixes plus one) is timed against the current configuration
in interleaved runs, B A then A B ..., and judged as the built-in ladder judges
(:func:`stave.bench.compare.verdict`: the interval of the median pair ratio above 1 + MIN_GAIN).

The loss check compares the candidate's first run with the baseline's first run (same seed, so the
same initial weights and the same samples): the first losses when a fix can change the arithmetic
(the unit declares it ``numeric``), and the input channel statistics always. A fix that changes what
is learned per step (batch size) is never compared on losses, and runs only when asked.

stave never edits the script; each run repeats whatever the script writes (checkpoints, logs).
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from stave.bench.compare import MIN_GAIN, Comparison, TimingPlan, verdict
from stave.bench.final import NO_FED, machine_facts
from stave.bench.ladder import grow_search
from stave.bench.losscheck import INPUT_STAT_TOL, LOSS_CHECK_STEPS, LOSS_NOISE_FACTOR, LossCheck
from stave.bench.losscheck import check_child_losses, input_noise_tolerance, yardstick_tolerance
from stave.bench.result import (
    BASELINE,
    KEPT,
    REVERT_ERROR,
    REVERT_LOSS,
    REVERT_SPEED,
    REVERTED,
    SKIPPED,
    LadderIncomplete,
    RungResult,
    ScriptLadderResult,
    Trial,
)
from stave.bench.rungs import Plan
from stave.bench.script_code import script_code
from stave.bench.script_rungs import ScriptConfig, ScriptContext, ScriptRung, script_rungs
from stave.bench.session import Window
from stave.capture.runner import Target
from stave.errors import StaveError, UsageError
from stave.inject.launch import ChildResult, ChildRun, run_child
from stave.inject.machine import this_machine
from stave.inject.registry import get_unit

log = logging.getLogger(__name__)

Progress = Callable[[str], None]
# How a run is started: the real one is stave.inject.launch.run_child (tests pass a fake).
RunFn = Callable[[ChildRun, str, str], ChildResult]

# Steps timed per run when --steps is not given: enough that a run's rate is not one step's noise,
# few enough that a run of a typical small script stays within seconds.
DEFAULT_STEPS = 20
# Untimed steps at the start of each run: the first steps allocate, build oneDNN/cuDNN plans and
# spin up loader workers.
WARMUP_STEPS = 3
# More warm-up with torch.compile: the compile fix compiles the forward from its second call.
COMPILE_WARMUP_STEPS = 3
# Interleaved pairs per comparison, extended up to MAX_PAIRS while the verdict is open and the
# median points to a gain (each run is a whole process: fewer than the in-process ladder's windows).
PAIRS = 3
MAX_PAIRS = 6
# A run that takes longer than this is stopped and counted as failed.
RUN_TIMEOUT_S = 900.0
WRITES_WARNING = ("stave bench ladder runs the script many times (two runs per pair): whatever it writes "
                  "(checkpoints, logs, outputs) is written again by every run")


@dataclass(frozen=True)
class ScriptOptions:
    """How the script ladder runs (``steps``: timed steps per run; ``warmup_steps`` before them)."""

    steps: int = DEFAULT_STEPS
    warmup_steps: int = WARMUP_STEPS
    pairs: int = PAIRS
    max_pairs: int = MAX_PAIRS
    seed: int = 0
    timeout_s: float | None = RUN_TIMEOUT_S
    quick: bool = False
    allow_learning_changes: bool = False
    min_gain: float = MIN_GAIN
    loss_steps: int = LOSS_CHECK_STEPS
    rungs: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.steps < 2:
            raise UsageError(f"--steps must be at least 2 for a script (a rate needs two step ends), got {self.steps}")
        # The same checks as the built-in ladder's windows (at least 3 pairs, max >= pairs).
        TimingPlan(warmup_steps=max(1, self.warmup_steps), pairs=self.pairs, max_pairs=self.max_pairs)


class RunFailed(StaveError):
    """A run of the script did not reach its steps (crash, time limit, too short)."""


@dataclass
class Runs:
    """The child runs of one climb: numbering, work folder, the options every run shares."""

    target: Target
    options: ScriptOptions
    work_dir: str
    run_fn: RunFn
    progress: Progress
    count: int = 0
    first: dict[ScriptConfig, ChildResult] = field(default_factory=dict)

    def warmup(self, config: ScriptConfig) -> int:
        return self.options.warmup_steps + (COMPILE_WARMUP_STEPS if "compile" in config.to_dict() else 0)

    def run(self, config: ScriptConfig, tag: str) -> tuple[ChildResult, Window]:
        """One run of ``config``; its result and its timed window. Raises :class:`RunFailed`."""
        warmup = self.warmup(config)
        spec = ChildRun(self.target, config.selection(self.options.allow_learning_changes),
                        steps=warmup + self.options.steps, loss_steps=self.options.loss_steps,
                        seed=self.options.seed, timeout_s=self.options.timeout_s)
        self.count += 1
        result = self.run_fn(spec, self.work_dir, f"{self.count:03d}-{tag}")
        if not result.ok:
            raise RunFailed(result.failure_text()[:300])
        ends = result.step_end_s
        if len(ends) < warmup + 2:
            raise RunFailed(f"the script ended after {len(ends)} steps, fewer than the {warmup} warm-up steps "
                            "and 2 timed ones; lower --steps or give the script more data")
        samples = sum(result.samples[warmup + 1:])
        elapsed_ns = int((ends[-1] - ends[warmup]) * 1e9)
        self.first.setdefault(config, result)
        return result, Window(len(ends) - warmup - 1, samples, max(elapsed_ns, 1), 0, None)

    def compare(self, a: ScriptConfig, b: ScriptConfig, tag: str, first_b: Window | None = None) -> Comparison:
        """A against B in interleaved runs: B A, A B, B A, ... ``first_b``: B's first window, already run
        (the candidate's first run, which the loss check and the fixes' report read)."""
        a_windows: list[Window] = []
        b_windows: list[Window] = []

        def pair(index: int) -> None:
            if index % 2 == 0:
                b_windows.append(first_b if index == 0 and first_b is not None else self.run(b, f"{tag}-B")[1])
                a_windows.append(self.run(a, f"{tag}-A")[1])
            else:
                a_windows.append(self.run(a, f"{tag}-A")[1])
                b_windows.append(self.run(b, f"{tag}-B")[1])

        for index in range(self.options.pairs):
            pair(index)
        result = Comparison(tuple(a_windows), tuple(b_windows))
        index = self.options.pairs
        gain = self.options.min_gain
        while index < self.options.max_pairs and result.decided(gain) == "open" and result.ratio > 1.0 + gain:
            pair(index)
            index += 1
            result = Comparison(tuple(a_windows), tuple(b_windows))
        return result


class ScriptClimb:
    """State of one climb over a script: runs, the reference run, the tolerance, results so far."""

    def __init__(self, runs: Runs, reference: ChildResult, tolerance: float) -> None:
        self.runs = runs
        self.options = runs.options
        self.progress = runs.progress
        self.reference = reference
        self.tolerance = tolerance
        self.reseed_input_tolerance: float | None = None
        self.baseline = ScriptConfig()
        self.x_of: dict[ScriptConfig, float] = {self.baseline: 1.0}
        self.results: list[RungResult] = []

    def evaluate(self, label: str, changes: dict[str, Any], base: ScriptConfig) -> Trial:
        """Run ``base`` plus ``changes`` against ``base``; keep it if it is faster and passes the check."""
        candidate = base.with_changes(self.options.allow_learning_changes, **changes)
        trial = Trial(label, changes, candidate)
        self.progress(f"  trying {label}")
        tag = label.split("(")[0]
        try:
            first, window = self.runs.run(candidate, f"{tag}-B")
            outcome = _not_applied(first, changes)
            if outcome is not None:
                # Nothing changed in the script: no timing, the rung does not apply to it.
                trial.reason, trial.revert_kind = outcome, SKIPPED
                self.progress(f"    {outcome}")
                return trial
            comparison = self.runs.compare(base, candidate, tag, first_b=window)
        except RunFailed as exc:
            trial.reason, trial.revert_kind = f"failed: {exc}"[:300], REVERT_ERROR
            self.progress(f"    {trial.reason}")
            return trial
        check = self._check(first, changes)
        trial.max_loss_dev = check.max_dev if check.losses else None
        trial.input_dev, trial.loss_tolerance, trial.loss_passed = check.input_dev, check.tolerance, check.passed
        trial.samples_per_s = comparison.b_rate
        trial.window_rates = [w.samples_per_s for w in comparison.b]
        trial.ratio, trial.noise = comparison.ratio, comparison.noise
        trial.x_baseline = self.x_of.get(base, 1.0) * comparison.ratio
        keep, why = verdict(comparison, self.options.min_gain)
        if not check.passed:
            trial.reason, trial.revert_kind = f"{check.describe()}; {comparison.ratio:.2f}x", REVERT_LOSS
        elif keep:
            trial.accepted, trial.reason = True, why
            self.x_of[candidate] = trial.x_baseline
        else:
            trial.reason, trial.revert_kind = why, REVERT_SPEED
        self.progress(f"    {trial.samples_per_s:.1f} samples/s: {'kept, ' if trial.accepted else ''}{trial.reason}")
        return trial

    def _check(self, run: ChildResult, changes: dict[str, Any]) -> LossCheck:
        units = [get_unit(unit_id) for unit_id in changes]
        learning = any(u is not None and u.changes_learning for u in units)
        numeric = any(u is not None and u.numeric for u in units)
        # A fix that leaves the arithmetic alone (workers, pinning) is held to the inputs only: with
        # loader workers a script's random augmentations draw from other generators.
        losses = None if learning or not numeric else run.losses
        reseeds = any(u is not None and u.reseeds for u in units)
        return check_child_losses(losses, run.input_stats, self.reference.losses, self.reference.input_stats,
                                  self.tolerance, self.input_tolerance() if reseeds else INPUT_STAT_TOL)

    def input_tolerance(self) -> float:
        """The input-statistics tolerance of a fix that reseeds random draws: how far another seed moves
        the script's inputs (one more run of the script as written, made once), see
        :func:`~stave.bench.losscheck.input_noise_tolerance`."""
        if self.reseed_input_tolerance is None:
            runs = self.runs
            # As many steps as the reference run, so both statistics cover the same batches' worth.
            spec = ChildRun(runs.target, steps=runs.warmup(self.baseline) + self.options.steps,
                            loss_steps=self.options.loss_steps, seed=self.options.seed + 1,
                            timeout_s=self.options.timeout_s)
            runs.count += 1
            self.progress("input-noise yardstick: the script as written with another seed")
            other = runs.run_fn(spec, runs.work_dir, f"{runs.count:03d}-input-noise")
            self.reseed_input_tolerance = input_noise_tolerance(other.input_stats if other.ok else None,
                                                          self.reference.input_stats)
        return self.reseed_input_tolerance

    def climb(self, rung: ScriptRung, current: ScriptConfig, ctx: ScriptContext) -> tuple[RungResult, ScriptConfig]:
        """One rung: its plan searched as the built-in ladder searches it."""
        try:
            plan = rung.plan(ctx, current)
        except UsageError as exc:
            plan = Plan.skipped(str(exc))
        if plan.skip is not None:
            self.progress(f"{rung.title}: skipped ({plan.skip})")
            return RungResult(rung.name, rung.title, SKIPPED, plan.skip), current
        self.progress(f"{rung.title}:")
        trials: list[Trial] = []
        chosen: Trial | None = None
        if plan.mode == "grow":
            chosen = grow_search(plan, current, self.evaluate, trials, self.progress)
        else:
            for label, changes in plan.candidates:
                trials.append(self.evaluate(label, changes, current))
                if trials[-1].revert_kind == SKIPPED:
                    break
            accepted = [t for t in trials if t.accepted]
            chosen = max(accepted, key=lambda t: t.ratio or 0.0) if accepted else None
        if trials and trials[0].revert_kind == SKIPPED:
            return RungResult(rung.name, rung.title, SKIPPED, trials[0].reason), current
        if chosen is not None:
            reason = chosen.reason if len(trials) == 1 else f"{chosen.label}: {chosen.reason}"
            return RungResult(rung.name, rung.title, KEPT, reason, trials, chosen), chosen.config
        kinds = {t.revert_kind for t in trials}
        kind = REVERT_SPEED if REVERT_SPEED in kinds else (REVERT_LOSS if REVERT_LOSS in kinds else REVERT_ERROR)
        shown = max((t for t in trials if t.ratio is not None), key=lambda t: t.ratio or 0.0, default=trials[0])
        reason = shown.reason if len(trials) == 1 else f"best {shown.label}: {shown.reason}"
        return RungResult(rung.name, rung.title, REVERTED, reason, trials, None, kind), current


def _not_applied(run: ChildResult, changes: dict[str, Any]) -> str | None:
    """The reason when the candidate's new fix changed nothing in the script (None when it applied)."""
    for entry in run.fixes:
        if entry.get("id") in changes and entry.get("status") != "applied":
            status = "does not apply" if entry.get("status") == "not_applicable" else "found nothing to change"
            return f"{status}: {entry.get('reason') or 'no reason given'}"
    return None


def run_script_ladder(
    target: Target,
    options: ScriptOptions | None = None,
    progress: Progress | None = None,
    run_fn: RunFn | None = None,
    work_dir: str | None = None,
) -> ScriptLadderResult:
    """Climb the script rungs (all, or ``options.rungs``) on ``target``; raises :class:`LadderIncomplete`
    with what was measured when stopped by Ctrl-C or a failure, :class:`UsageError` when the script
    fails as written."""
    options = options or ScriptOptions()
    say = progress or (lambda _msg: None)
    target.check()
    try:
        rungs = script_rungs(list(options.rungs) if options.rungs is not None else None)
    except KeyError as exc:
        known = ", ".join(r.name for r in script_rungs())
        raise UsageError(f"--rungs: unknown script rung(s) {exc.args[0]}; choose from {known}") from None
    folder = work_dir or tempfile.mkdtemp(prefix="stave-ladder-")
    runs = Runs(target, options, folder, run_fn or run_child, say)
    started = time.perf_counter()
    machine = this_machine()
    facts = machine_facts(_device_of(machine))
    say(f"note: {WRITES_WARNING}; runs' logs in {folder}")
    say("baseline: the script as written")
    try:
        reference, _ = runs.run(ScriptConfig(), "baseline")
    except RunFailed as exc:
        raise UsageError(f"{exc} (as written, without any fix; its output is in {folder})") from None
    tolerance = _tolerance(runs, reference)
    batch = reference.samples[0] if reference.samples and reference.samples[0] > 0 else None
    ctx = ScriptContext(machine, batch, options.allow_learning_changes, options.quick)
    climb = ScriptClimb(runs, reference, tolerance)
    climb.results.append(RungResult("baseline", "baseline", BASELINE, "the script as written"))
    current = climb.baseline
    try:
        for rung in rungs:
            result, current = climb.climb(rung, current, ctx)
            climb.results.append(result)
        return _finish(climb, current, started, facts, target)
    except (KeyboardInterrupt, StaveError) as exc:
        reason = "interrupted (Ctrl-C)" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
        partial = _result(climb, current, started, facts, target, incomplete=reason)
        raise LadderIncomplete(partial, exc) from exc


def _device_of(machine: Any) -> Any:
    import torch

    return torch.device("cuda" if machine.cuda else "cpu")


def _tolerance(runs: Runs, reference: ChildResult) -> float:
    """The loss tolerance: the floor, or 10x how far bf16-rounded initial weights move this script's
    first losses (the yardstick run; a yardstick that fails leaves the floor)."""
    spec = ChildRun(runs.target, steps=runs.options.loss_steps, loss_steps=runs.options.loss_steps,
                    seed=runs.options.seed, timeout_s=runs.options.timeout_s, perturb_bf16=True)
    runs.count += 1
    runs.progress("loss-check yardstick: the script with its initial weights rounded to bf16")
    yardstick = runs.run_fn(spec, runs.work_dir, f"{runs.count:03d}-yardstick")
    return yardstick_tolerance(yardstick.losses if yardstick.ok else [], reference.losses)


def _finish(climb: ScriptClimb, final: ScriptConfig, started: float, facts: dict[str, Any],
            target: Target) -> ScriptLadderResult:
    """The final configuration against a fresh baseline, side by side (skipped when nothing was kept)."""
    if final == climb.baseline:
        climb.progress("nothing was kept: the script as written is the final configuration")
        base_rate = climb.reference.samples_per_s(climb.runs.warmup(final))
        _baseline_row(climb, base_rate, [])
        return _result(climb, final, started, facts, target, base=base_rate, final_rate=base_rate, speedup=1.0,
                       noise=0.0)
    climb.progress("final configuration against the script as written:")
    direct = climb.runs.compare(climb.baseline, final, "final")
    climb.progress(f"  {direct.ratio:.2f}x (±{direct.noise:.0%})")
    _baseline_row(climb, direct.a_rate, [w.samples_per_s for w in direct.a])
    return _result(climb, final, started, facts, target, base=direct.a_rate, final_rate=direct.b_rate,
                   speedup=direct.ratio, noise=direct.noise)


def _baseline_row(climb: ScriptClimb, rate: float | None, window_rates: list[float]) -> None:
    """The baseline's row shows the script's own rate, as timed in the final comparison."""
    row = climb.results[0]
    row.chosen = Trial("as written", {}, climb.baseline, samples_per_s=rate, ratio=1.0, x_baseline=1.0,
                       max_loss_dev=0.0, input_dev=0.0, loss_passed=True, accepted=True, window_rates=window_rates)
    row.trials.append(row.chosen)


def _result(climb: ScriptClimb, final: ScriptConfig, started: float, facts: dict[str, Any], target: Target,
            base: float | None = None, final_rate: float | None = None, speedup: float | None = None,
            noise: float | None = None, incomplete: str | None = None) -> ScriptLadderResult:
    options = climb.options
    chain = 1.0
    for rung in climb.results:
        if rung.status == KEPT and rung.chosen is not None and rung.chosen.ratio:
            chain *= rung.chosen.ratio
    notes = [WRITES_WARNING]
    if final.changes_learning():
        notes.append("the final configuration changes what is learned per step (--allow-learning-changes): "
                     "its losses were not compared; re-check convergence")
    if incomplete is not None:
        notes.append(f"incomplete: {incomplete}")
    fed = {**NO_FED, "reason": "not measured for a script: its input pipeline cannot be replaced by one "
                               "device batch from outside"}
    return ScriptLadderResult(
        script=target.name,
        args=list(target.args),
        machine={**facts, "load_avg_1m_end": machine_facts(_device_of(this_machine()))["load_avg_1m"]},
        options={"steps": options.steps, "warmup_steps": options.warmup_steps, "pairs": options.pairs,
                 "max_pairs": options.max_pairs, "seed": options.seed, "quick": options.quick,
                 "allow_learning_changes": options.allow_learning_changes, "min_gain": options.min_gain},
        baseline=climb.baseline,
        final=final,
        rungs=list(climb.results),
        baseline_samples_per_s=base,
        final_samples_per_s=final_rate,
        best_speedup=speedup,
        best_speedup_noise=noise,
        chain_speedup=chain,
        loss_check={"steps": options.loss_steps, "tolerance": climb.tolerance, "noise_factor": LOSS_NOISE_FACTOR,
                    "input_tolerance": INPUT_STAT_TOL, "input_tolerance_reseeding": climb.reseed_input_tolerance,
                    "reference": "the script as written, same seed"},
        code=script_code(Path(target.name).name, final.changes_from(climb.baseline)),
        duration_s=time.perf_counter() - started,
        runs=climb.runs.count,
        fed=fed,
        notes=notes,
        incomplete=incomplete,
    )
