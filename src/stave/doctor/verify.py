"""``stave doctor --verify``: run the script again with each top finding's fix injected, and measure it.

For each of the top findings (rank order) whose fix can be injected (:mod:`stave.doctor.fix_map`):

1. a warm-up pair, baseline (A) then fixed (B), each a fresh child process
   (:func:`stave.inject.launch.run_child`) with the same seed. B's report says whether the fix
   applied; its first losses and input statistics against A's are the loss check (the ladder's,
   :class:`stave.bench.losscheck.LossCheck`): a fix that fails it is reported as reverted, not timed.
2. ``pairs`` measured pairs A B A B ...; each run gives its median step time after warm-up (the
   mean for once-per-epoch costs, samples per second when the fix changes the batch: the plan's
   ``statistic``); each pair gives A over B. The measured
   speedup is the median of the pair ratios, the interval their min and max: interleaving puts
   both sides of a pair under the same disturbance of a shared machine.

The loss tolerance is the ladder's: :data:`~stave.bench.losscheck.LOSS_REL_TOL`, or
:data:`~stave.bench.losscheck.LOSS_NOISE_FACTOR` times how far rounding the initial weights to bf16
moves this job's losses (one extra run, made once). For a fix that moves random draws to other
generators (loader workers), the input statistics may differ as much as another seed makes them
(times :data:`~stave.bench.losscheck.INPUT_NOISE_FACTOR`; one more run, made once). A fix that crashes the script is reported and
the next finding tried. Ctrl-C stops the current run and keeps everything measured so far.
The user's files are never edited; each run repeats the script's own writes.
"""

from __future__ import annotations

import logging
import math
import tempfile
from dataclasses import dataclass
from typing import Any, Sequence

from stave.capture.runner import Target
from stave.diagnose.finding import MACHINE_IDS, Finding, rank_findings
from stave.doctor.fix_map import FixPlan, plan_for
from stave.doctor.verification import VerifiedFinding, Verification
from stave.inject.launch import ChildResult, ChildRun, run_child
from stave.inject.registry import get_unit
from stave.inject.selection import Selection

log = logging.getLogger(__name__)

# Measured pairs per finding by default: three ratios give a median and a spread; the done-when
# bar of the issue (the hand fix inside the interval) asks for five.
DEFAULT_PAIRS = 3
# Optimizer steps per run when the doctor was not given --steps: past a warm-up of 5 this leaves
# 25 steps for the median, enough for a stable median on a quiet machine, seconds for small scripts.
DEFAULT_RUN_STEPS = 30
# Steps of each run left out of its median: the doctor's own default warm-up (allocator, lazy
# modules, worker start-up; compile happens on the second call and lands here too).
DEFAULT_RUN_WARMUP = 5
# A run past this many seconds is stopped (and counts as crashed): a hung fix must not hang --verify.
DEFAULT_RUN_TIMEOUT_S = 600.0
# The seed of the input-noise yardstick run: any other than the runs' own.
NOISE_SEED_OFFSET = 1


@dataclass(frozen=True)
class VerifyOptions:
    """How many findings to verify and how each is measured; validated on creation."""

    top: int = 3
    pairs: int = DEFAULT_PAIRS
    steps: int = DEFAULT_RUN_STEPS
    warmup: int = DEFAULT_RUN_WARMUP
    seed: int = 0
    timeout_s: float = DEFAULT_RUN_TIMEOUT_S
    allow_learning_changes: bool = False

    def __post_init__(self) -> None:
        if self.top < 1:
            raise ValueError(f"top must be >= 1, got {self.top}")
        if self.pairs < 1:
            raise ValueError(f"pairs must be >= 1, got {self.pairs}")
        if self.warmup < 0 or self.steps < self.warmup + 3:
            raise ValueError(f"steps ({self.steps}) must exceed warmup ({self.warmup}) by at least 3 "
                             "(a median of at least two step times)")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")


class VerifyEvents:
    """What the orchestration reports as it goes (the CLI shows it as progress); no-ops here."""

    def planned(self, total_runs: int) -> None:
        """The number of child runs planned (warm-up pairs, measured pairs and the yardstick run)."""

    def run_started(self, finding_id: str, label: str) -> None:
        """A child run begins (``label``: "baseline", "fixed", "bf16 yardstick", with its pair)."""

    def run_done(self, finding_id: str, result: ChildResult) -> None:
        """A child run ended."""

    def skipped_runs(self, count: int) -> None:
        """``count`` planned runs will not happen (a fix crashed, did not apply or was reverted)."""

    def finished(self, item: VerifiedFinding) -> None:
        """A finding's verification is complete."""


class _Runner:
    """Runs the child processes of one verification and keeps the loss-check yardstick."""

    def __init__(self, target: Target, options: VerifyOptions, work_dir: str, events: VerifyEvents) -> None:
        self.target = target
        self.options = options
        self.work_dir = work_dir
        self.events = events
        self.count = 0
        self._tolerance: float | None = None
        self._input_tolerance: float | None = None

    def run(self, finding_id: str, label: str, selection: Selection | None = None, perturb: bool = False,
            seed_offset: int = 0) -> ChildResult:
        self.events.run_started(finding_id, label)
        self.count += 1
        spec = ChildRun(self.target, selection or Selection(), steps=self.options.steps,
                        seed=self.options.seed + seed_offset, timeout_s=self.options.timeout_s, perturb_bf16=perturb)
        result = run_child(spec, self.work_dir, f"{self.count:03d}-{finding_id}-{label.replace(' ', '-')}")
        self.events.run_done(finding_id, result)
        return result

    def value(self, result: ChildResult, statistic: str) -> float | None:
        """The run's number: median (or mean) step time after warm-up, or samples per second."""
        if statistic == "samples_per_s":
            return result.samples_per_s(self.options.warmup)
        if statistic == "mean_step_s":
            return result.mean_step_s(self.options.warmup)
        return result.median_step_s(self.options.warmup)

    def loss_tolerance(self, baseline: ChildResult) -> float:
        """The ladder's tolerance, scaled by how far bf16-rounded initial weights move this job's losses."""
        from stave.bench.losscheck import yardstick_tolerance

        if self._tolerance is None:
            yardstick = self.run("loss-check", "bf16 yardstick", perturb=True)
            self._tolerance = yardstick_tolerance(list(yardstick.losses), list(baseline.losses))
        return self._tolerance

    def input_tolerance(self, baseline: ChildResult) -> float:
        """The input-statistics tolerance for a fix that reseeds random draws (made once, one more run)."""
        from stave.bench.losscheck import input_noise_tolerance

        if self._input_tolerance is None:
            other = self.run("loss-check", "input-noise yardstick", seed_offset=NOISE_SEED_OFFSET)
            self._input_tolerance = input_noise_tolerance(other.input_stats, baseline.input_stats)
        return self._input_tolerance


def loss_check(fixed: ChildResult, baseline: ChildResult, tolerance: float,
               input_tolerance: float | None = None) -> dict[str, Any]:
    """The ladder's loss check of ``fixed`` against ``baseline`` (same seed, same first steps);
    ``input_tolerance``: the input statistics' (default the ladder's)."""
    from stave.bench.losscheck import INPUT_STAT_TOL, check_child_losses

    in_tol = INPUT_STAT_TOL if input_tolerance is None else input_tolerance
    check = check_child_losses(list(fixed.losses), fixed.input_stats, list(baseline.losses), baseline.input_stats,
                               tolerance, in_tol)
    max_dev = check.max_dev
    return {"max_dev": max_dev if math.isfinite(max_dev) else None, "tolerance": tolerance,
            "input_dev": check.input_dev, "input_tolerance": in_tol, "steps": len(check.losses),
            "passed": check.passed,
            "text": check.describe() if check.losses or check.input_dev is not None else "no loss seen to compare"}


def _fix_outcome(report: list[dict[str, Any]]) -> tuple[str, str] | None:
    """("not_applicable"|"no_effect", reason) when none of the plan's fixes changed anything."""
    if not report or any(f.get("status") == "applied" for f in report):
        return None
    statuses = {f.get("status") for f in report}
    status = "not_applicable" if statuses == {"not_applicable"} else "no_effect"
    return status, "; ".join(f"{f.get('id')}: {f.get('reason')}" for f in report)


def _verify_one(runner: _Runner, finding: Finding, plan: FixPlan, item: VerifiedFinding) -> None:
    """Fill ``item`` with the measurements of ``plan`` (the warm-up pair, the loss check, the pairs)."""
    options = runner.options
    selection = Selection(plan.requests, allow_learning_changes=plan.changes_learning)
    runs_left = 2 * options.pairs + 2
    base = runner.run(finding.id, "baseline warm-up")
    runs_left -= 1
    if not base.ok:
        item.status, item.reason = "baseline_failed", base.failure_text("without any fix")
        runner.events.skipped_runs(runs_left)
        return
    fixed = runner.run(finding.id, "fixed warm-up", selection)
    runs_left -= 1
    item.fix_report = fixed.fixes
    outcome = _fix_outcome(fixed.fixes)
    if not fixed.ok or outcome is not None:
        item.status, item.reason = ("crashed", fixed.failure_text("with the fix")) if not fixed.ok else outcome  # type: ignore[assignment]
        runner.events.skipped_runs(runs_left)
        return
    if plan.changes_learning:
        item.loss = {"passed": None, "text": "not compared: the fix changes what is learned per step"}
    else:
        item.loss = loss_check(fixed, base, runner.loss_tolerance(base),
                               runner.input_tolerance(base) if _reseeds(plan) else None)
        if not item.loss["passed"]:
            item.status, item.reason = "reverted", f"loss check failed: {item.loss['text']}"
            runner.events.skipped_runs(runs_left)
            return
    for pair in range(options.pairs):
        a = runner.run(finding.id, f"baseline {pair + 1}")
        b = runner.run(finding.id, f"fixed {pair + 1}", selection)
        runs_left -= 2
        if not b.ok:
            item.status, item.reason = "crashed", b.failure_text("with the fix")
            runner.events.skipped_runs(runs_left)
            return
        va, vb = runner.value(a, plan.statistic), runner.value(b, plan.statistic)
        if not a.ok or va is None or vb is None or va <= 0 or vb <= 0:
            item.reason = f"pair {pair + 1} gave no timing (baseline {a.stopped_by}, fixed {b.stopped_by})"
            continue
        item.baseline_values.append(va)
        item.fixed_values.append(vb)
        item.ratios.append(vb / va if plan.statistic == "samples_per_s" else va / vb)
    item.status = "kept" if item.ratios else "unmeasured"
    if not item.ratios:
        item.reason = (f"no pair gave a timing: each run needs at least {options.warmup + 3} steps "
                       f"({item.reason or 'the script ended earlier'})")


def _reseeds(plan: FixPlan) -> bool:
    """Whether one of the plan's fixes moves random draws to other generators (see FixUnit.reseeds)."""
    return any(u is not None and u.reseeds for u in (get_unit(r.id) for r in plan.requests))


def planned_runs(plans: Sequence[FixPlan], pairs: int) -> int:
    """Child runs a verification of ``plans`` makes at most (the yardstick runs included)."""
    injectable = [p for p in plans if p.injectable]
    checked = [p for p in injectable if not p.changes_learning]
    yardsticks = (1 if checked else 0) + (1 if any(_reseeds(p) for p in checked) else 0)
    return len(injectable) * (2 + 2 * pairs) + yardsticks


def verify(findings: Sequence[Finding], target: Target, options: VerifyOptions, work_dir: str | None = None,
           events: VerifyEvents | None = None) -> Verification:
    """Verify the top ``options.top`` of ``findings`` on ``target`` (see the module docstring).

    Never raises for a failing script or Ctrl-C: what was measured is returned, with
    ``interrupted`` set after Ctrl-C.
    """
    ranked = rank_findings(list(findings))
    # The top findings about the job: a finding about the machine (MACHINE_BUSY) has nothing to inject,
    # and what it says (the timings are disturbed) goes into the notes instead.
    top = [f for f in ranked if f.id not in MACHINE_IDS][: options.top]
    plans = [plan_for(f, options.allow_learning_changes) for f in top]
    positions = [ranked.index(f) + 1 for f in top]
    verification = verify_plans(list(zip(top, plans)), target, options, work_dir, events, positions)
    busy = [f.id for f in ranked if f.id in MACHINE_IDS]
    if busy:
        verification.notes.insert(0, f"the doctor's run found {busy[0]}: other processes held the job's cores, so "
                                     "these measurements are disturbed too (the intervals show how much)")
    return verification


def verify_plans(planned: Sequence[tuple[Finding, FixPlan]], target: Target, options: VerifyOptions,
                 work_dir: str | None = None, events: VerifyEvents | None = None,
                 positions: Sequence[int] | None = None) -> Verification:
    """Verify each finding with its given plan, in order (:func:`verify` with the plans chosen by the caller).

    ``positions``: each finding's place in the doctor's ranked list (default 1, 2, ...)."""
    events = events or VerifyEvents()
    top = [f for f, _ in planned]
    plans = [p for _, p in planned]
    verification = Verification(pairs=options.pairs, steps_per_run=options.steps, warmup_steps=options.warmup)
    events.planned(planned_runs(plans, options.pairs))
    work = work_dir or tempfile.mkdtemp(prefix="stave-verify-")
    runner = _Runner(target, options, work, events)
    for rank, finding, plan in zip(positions or range(1, len(top) + 1), top, plans):
        item = VerifiedFinding(finding.id, rank, finding.title, finding.est_speedup,
                               "not_verifiable" if not plan.injectable else "interrupted",
                               fixes=plan.label(), reason=plan.reason, statistic=plan.statistic,
                               changes_learning=plan.changes_learning)
        verification.findings.append(item)
        if not plan.injectable or verification.interrupted:
            continue
        try:
            _verify_one(runner, finding, plan, item)
        except KeyboardInterrupt:
            verification.interrupted = True
            if item.status in ("interrupted", "kept"):
                item.status = "kept" if item.ratios else "interrupted"
                item.reason = f"interrupted (Ctrl-C) after {len(item.ratios)} of {options.pairs} pairs"
            log.warning("verification interrupted: keeping what was measured")
        try:
            events.finished(item)
        except KeyboardInterrupt:  # a second Ctrl-C while the line is shown: stop after this finding
            verification.interrupted = True
    verification.notes.append(f"runs' files (results, script output) are in {work}")
    return verification
