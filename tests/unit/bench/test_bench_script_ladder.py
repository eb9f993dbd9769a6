"""The ladder on a script: keep/revert, the loss check, fixes that find nothing, learning changes, Ctrl-C.

The child runs are replaced by a fake (``run_fn``) that answers from a speed model: each run's step
ends follow from the fixes it was given, with a small alternating jitter so medians and intervals
are real computations. The real child process is exercised by tests/integration/bench.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import jsonschema
import pytest

from stave.bench.result import LadderIncomplete
from stave.bench.script_ladder import ScriptOptions, run_script_ladder
from stave.capture.runner import Target
from stave.errors import UsageError
from stave.inject.launch import ChildResult, ChildRun
from stave.report.bench_script import SCHEMA, summary_lines, to_json
from stave.report.schemas import load_schema

BATCH = 16
LOSSES = [2.30, 2.25, 2.21, 2.18]
STATS = [[0.0, 1.0], [0.1, 0.9], [-0.1, 1.1]]


class FakeScript:
    """Answers child runs: ``speed`` by fix id (samples/s factor), ``loss_shift`` by fix id (relative),
    ``unused`` fix ids the script gives no chance to apply, ``crash`` fix ids that crash it."""

    def __init__(self, speed: dict[str, float] | None = None, loss_shift: dict[str, float] | None = None,
                 unused: tuple[str, ...] = (), crash: tuple[str, ...] = (),
                 interrupt_after: int | None = None, stats_shift: dict[str, float] | None = None,
                 seed_stats_shift: float = 0.0) -> None:
        self.speed = speed or {}
        self.loss_shift = loss_shift or {}
        self.unused = unused
        self.crash = crash
        self.interrupt_after = interrupt_after
        # Input means moved by this many sd: by fix id, and in a run with another seed.
        self.stats_shift = stats_shift or {}
        self.seed_stats_shift = seed_stats_shift
        self.runs: list[dict[str, Any]] = []

    def __call__(self, run: ChildRun, work_dir: str, name: str) -> ChildResult:
        fixes = {f.id: f.param_dict for f in run.selection.fixes}
        self.runs.append(fixes)
        if self.interrupt_after is not None and len(self.runs) > self.interrupt_after:
            raise KeyboardInterrupt
        if any(f in self.crash for f in fixes):
            return ChildResult(1, "error", "RuntimeError: planted crash")
        batch = fixes.get("batch_size", {}).get("batch_size", BATCH)
        rate = 100.0
        for fix_id in fixes:
            rate *= self.speed.get(fix_id, 1.0) if fix_id not in self.unused else 1.0
        if "batch_size" in fixes:
            rate *= 1.0 + 0.1 * (batch // BATCH)
        jitter = 1.0 + 0.004 * (-1) ** len(self.runs)
        step_s = batch / (rate * jitter)
        steps = run.steps or 10
        # The yardstick run (bf16-rounded initial weights) moves the losses by 0.2%: a 2% tolerance.
        shift = 1.002 if run.perturb_bf16 else 1.0
        for fix_id in fixes:
            shift *= 1.0 + self.loss_shift.get(fix_id, 0.0)
        report = [{"id": f, "params": p, "status": "no_effect" if f in self.unused else "applied",
                   "reason": "no DataLoader over a TensorDataset" if f in self.unused else None}
                  for f, p in fixes.items()]
        moved = sum(self.stats_shift.get(f, 0.0) for f in fixes) + (self.seed_stats_shift if run.seed else 0.0)
        stats = [[mean + moved * sd, sd] for mean, sd in STATS]
        return ChildResult(0, "steps", step_end_s=[step_s * (i + 1) for i in range(steps)], samples=[batch] * steps,
                           losses=[v * shift for v in LOSSES], input_stats=stats, fixes=report)


@pytest.fixture
def script(tmp_path: Path) -> Target:
    path = tmp_path / "train.py"
    path.write_text("# a training script (never run here: the runs are faked)\n")
    return Target(str(path))


def climb(script: Target, fake: Callable[..., ChildResult], tmp_path: Path, **options: Any):
    opts = ScriptOptions(steps=5, **{"pairs": 3, "max_pairs": 4, **options})
    return run_script_ladder(script, opts, run_fn=fake, work_dir=str(tmp_path / "runs"))


def rung(result, name: str):
    return next(r for r in result.rungs if r.name == name)


def test_a_faster_fix_is_kept_and_a_flat_one_reverted(script: Target, tmp_path: Path) -> None:
    fake = FakeScript(speed={"batched_fetch": 1.5})
    result = climb(script, fake, tmp_path, rungs=("batched_fetch", "set_to_none"))
    assert rung(result, "batched_fetch").status == "kept"
    flat = rung(result, "set_to_none")
    assert flat.status == "reverted" and flat.revert_kind == "speed" and flat.reason.startswith("no clear gain")
    assert result.final.to_dict() == {"batched_fetch": {}}
    assert result.best_speedup == pytest.approx(1.5, rel=0.02) and result.chain_speedup == pytest.approx(1.5, rel=0.02)
    assert "BatchSampler" in result.code and "set_to_none" not in result.code
    # The baseline row shows the script's own rate from the final comparison.
    assert result.rungs[0].chosen.samples_per_s == pytest.approx(100.0, rel=0.02)
    # baseline, yardstick, 3 pairs per candidate (its first B run included), 3 final pairs.
    assert result.runs == len(fake.runs) == 2 + 6 + 6 + 6
    assert result.loss_check["tolerance"] == pytest.approx(0.02, rel=0.01)
    doc = json.loads(json.dumps(to_json(result)))
    jsonschema.validate(doc, load_schema(SCHEMA))
    assert doc["schema"] == "stave.bench.script/1" and doc["final_fixes"] == {"batched_fetch": {}}
    assert [r["status"] for r in doc["rungs"]] == ["baseline", "kept", "reverted"]


def test_a_fix_that_changes_the_losses_is_reverted_for_loss(script: Target, tmp_path: Path) -> None:
    fake = FakeScript(speed={"compile": 1.4}, loss_shift={"compile": 0.05})
    result = climb(script, fake, tmp_path, rungs=("compile",))
    row = rung(result, "compile")
    assert row.status == "reverted" and row.revert_kind == "loss"
    assert row.trials[0].max_loss_dev == pytest.approx(0.05, rel=0.01) and "loss off by 5.00%" in row.reason
    assert row.trials[0].ratio == pytest.approx(1.4, rel=0.02)
    assert result.final.to_dict() == {}


def test_a_fix_that_finds_nothing_to_change_is_skipped_after_one_run(script: Target, tmp_path: Path) -> None:
    fake = FakeScript(speed={"num_workers": 2.0}, unused=("num_workers",))
    result = climb(script, fake, tmp_path, rungs=("workers",))
    row = rung(result, "workers")
    assert row.status == "skipped" and "found nothing to change" in row.reason
    assert len(fake.runs) == 3  # baseline, yardstick, one run with 1 worker; no timing, no larger counts


@pytest.mark.parametrize(("seed_noise_sd", "kept"), [(0.1, True), (0.0, False)])
def test_a_worker_fix_may_move_the_inputs_as_far_as_another_seed_does(
        script: Target, tmp_path: Path, seed_noise_sd: float, kept: bool) -> None:
    # Workers draw random augmentations from their own seeds: inputs 0.15 sd off. Another seed moves
    # them 0.1 sd, so twice that (0.2) is allowed; with no seed-to-seed noise the 0.1 floor reverts it.
    fake = FakeScript(speed={"num_workers": 2.0}, stats_shift={"num_workers": 0.15}, seed_stats_shift=seed_noise_sd)
    result = climb(script, fake, tmp_path, rungs=("workers",))
    row = rung(result, "workers")
    assert (row.status == "kept") is kept
    if not kept:
        assert row.revert_kind == "loss"
    assert result.loss_check["input_tolerance_reseeding"] == pytest.approx(max(0.1, 2 * seed_noise_sd))


def test_batch_size_only_with_the_flag_and_never_on_losses(script: Target, tmp_path: Path) -> None:
    result = climb(script, FakeScript(), tmp_path, rungs=("batch_size",))
    assert rung(result, "batch_size").status == "skipped"
    assert "--allow-learning-changes" in rung(result, "batch_size").reason
    # With the flag: the batch grows (its losses differ, as a larger batch's do, and are not compared).
    fake = FakeScript(loss_shift={"batch_size": 0.2})
    result = climb(script, fake, tmp_path, rungs=("batch_size",), allow_learning_changes=True)
    row = rung(result, "batch_size")
    assert row.status == "kept" and result.final.to_dict()["batch_size"]["batch_size"] == 8 * BATCH
    assert [t.changes["batch_size"]["batch_size"] for t in row.trials] == [32, 64, 128]
    assert all(t.max_loss_dev is None and t.loss_passed for t in row.trials)
    assert any("changes what is learned per step" in line for line in summary_lines(result))


def test_a_crashing_fix_is_reverted_and_the_next_rung_tried(script: Target, tmp_path: Path) -> None:
    fake = FakeScript(speed={"set_to_none": 1.3}, crash=("batched_fetch",))
    result = climb(script, fake, tmp_path, rungs=("batched_fetch", "set_to_none"))
    crashed = rung(result, "batched_fetch")
    assert crashed.status == "reverted" and crashed.revert_kind == "error" and "planted crash" in crashed.reason
    assert rung(result, "set_to_none").status == "kept"


def test_ctrl_c_keeps_the_rungs_measured_so_far(script: Target, tmp_path: Path) -> None:
    fake = FakeScript(speed={"batched_fetch": 1.5}, interrupt_after=8)
    with pytest.raises(LadderIncomplete) as stopped:
        climb(script, fake, tmp_path, rungs=("batched_fetch", "set_to_none"))
    result = stopped.value.result
    assert isinstance(stopped.value.cause, KeyboardInterrupt) and result.incomplete == "interrupted (Ctrl-C)"
    assert rung(result, "batched_fetch").status == "kept" and result.final.to_dict() == {"batched_fetch": {}}
    assert result.best_speedup is None and summary_lines(result)[0].startswith("INCOMPLETE")
    jsonschema.validate(json.loads(json.dumps(to_json(result))), load_schema(SCHEMA))


def test_a_script_that_fails_as_written_is_a_usage_error(script: Target, tmp_path: Path) -> None:
    def broken(run: ChildRun, work_dir: str, name: str) -> ChildResult:
        return ChildResult(1, "error", "SyntaxError: invalid syntax")

    with pytest.raises(UsageError, match="SyntaxError: invalid syntax.*as written"):
        climb(script, broken, tmp_path)
    with pytest.raises(UsageError, match="unknown script rung"):
        climb(script, FakeScript(), tmp_path, rungs=("warp_drive",))
