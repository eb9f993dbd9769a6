"""The ladder oracle's stages on synthetic timings: ranking, the final fraction, failures, Ctrl-C.

A fake runner returns each configuration's rate from a speed model (with a small alternating
jitter, so medians and intervals are real computations); nothing is timed.
"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest

from benchmarks import ladder_oracle as O
from stave.bench.settings import RunConfig


def speed(config: RunConfig) -> float:
    """samples/s: each doubling of the batch 1.1x up to 256 (512 is slower), channels_last 1.1x,
    a worker 1.02x, compile 1.05x."""
    rate = 100.0 * (1 + 0.1 * (min(config.batch_size, 256).bit_length() - 6))
    rate *= 0.97 if config.batch_size > 256 else 1.0
    rate *= 1.1 if config.train.channels_last else 1.0
    rate *= 1.02 if config.num_workers else 1.0
    rate *= 1.05 if config.train.compile else 1.0
    return rate


class FakeRunner:
    """Rates from ``model``; ``broken`` configurations raise when timed."""

    def __init__(self, model=speed, broken: tuple[RunConfig, ...] = ()) -> None:
        self.model = model
        self.broken = broken
        self.open_now: set[RunConfig] = set()
        self.most_open = 0
        self.windows = 0

    def open(self, config: RunConfig) -> None:
        self.open_now.add(config)
        self.most_open = max(self.most_open, len(self.open_now))

    def window(self, config: RunConfig) -> float:
        assert config in self.open_now, f"{config} timed while closed"
        if config in self.broken:
            raise RuntimeError("DataLoader worker (pid 1) exited unexpectedly")
        self.windows += 1
        return self.model(config) * (1.0 + 0.005 * (-1) ** self.windows)

    def close(self, config: RunConfig) -> None:
        self.open_now.discard(config)


REFERENCE = RunConfig(batch_size=32)
GRID = O.grid(REFERENCE, (32, 64, 128, 256, 512), (0, 1), ("fp32",), (False, True))
BEST = REFERENCE.with_changes(batch_size=256, num_workers=1, channels_last=True, compile=True)


def plan(**changes: Any) -> O.GridPlan:
    return O.GridPlan(REFERENCE, tuple(GRID), **{"compile": True, "final_rounds": 5, **changes})


def run(runner: FakeRunner, kept: RunConfig, **changes: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    records: list[dict[str, Any]] = []
    oracle = O.Oracle(runner, plan(**changes), lambda: (kept, {"best_speedup": None}),
                      lambda doc: records.append(json.loads(json.dumps(doc))), lambda _m: None)
    return oracle.run(), records


def test_the_grid_best_is_found_and_a_ladder_that_kept_it_scores_one() -> None:
    runner = FakeRunner()
    doc, _ = run(runner, BEST)
    final = doc["stages"]["final"]
    assert final["best_grid"] == O.label(BEST)
    assert final["fraction"] == pytest.approx(1.0) and final["goal_met"]
    # The final round: the kept configuration and the grid's other top 2, each timed every round.
    assert len(final["contenders"]) == 3 and all(len(c["window_rates"]) == 5 for c in final["contenders"])
    assert runner.open_now == set() and runner.most_open <= O.SCREEN_BLOCK + 1


def test_a_ladder_short_of_the_best_gets_its_fraction_and_misses_the_goal() -> None:
    kept = REFERENCE.with_changes(batch_size=64)
    doc, _ = run(FakeRunner(), kept)
    final = doc["stages"]["final"]
    expected = speed(kept) / speed(BEST)
    assert final["fraction"] == pytest.approx(expected, rel=0.02) and not final["goal_met"]
    lo, hi = final["fraction_interval"]
    assert lo <= final["fraction"] <= hi
    assert [c["label"] for c in final["contenders"]][0] == O.label(kept) and len(final["contenders"]) == 4


def test_compile_only_for_the_best_eager_points_and_left_out_when_asked() -> None:
    doc, _ = run(FakeRunner(), BEST)
    compiled = doc["stages"]["compile"]["points"]
    assert len(compiled) == O.COMPILE_TOP and all(p["config"]["compile"] for p in compiled)
    eager_best = doc["stages"]["refine"]["points"]
    assert {p["config"]["batch_size"] for p in compiled} <= {p["config"]["batch_size"] for p in eager_best}
    doc, _ = run(FakeRunner(), BEST.with_changes(compile=False), compile=False)
    assert "skipped" in doc["stages"]["compile"]
    assert doc["stages"]["final"]["best_grid"] == O.label(BEST.with_changes(compile=False))


def test_a_failing_point_is_marked_and_the_rest_go_on() -> None:
    broken = REFERENCE.with_changes(batch_size=256, num_workers=1, channels_last=True)
    doc, records = run(FakeRunner(broken=(broken,)), BEST.with_changes(num_workers=0))
    screened = {p["label"]: p for p in doc["stages"]["screen"]["points"]}
    assert "exited unexpectedly" in screened[O.label(broken)]["error"]
    assert O.label(broken) not in [p["label"] for p in doc["stages"]["refine"]["points"]]
    assert doc["stages"]["final"]["goal_met"]
    # The result was recorded after every screen block and every later stage.
    assert len(records) == -(-len(GRID) // O.SCREEN_BLOCK) + 4


def test_main_keeps_the_stages_measured_before_ctrl_c(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stave.bench.ladder as ladder
    import stave.bench.workloads as workloads

    spec = types.SimpleNamespace(name="seed-resnet18", description="fake", batch_size=32, num_workers=0,
                                 set_to_none=True, dataset=range(5000))
    monkeypatch.setattr(workloads, "build_workload", lambda name, quick=False: spec)
    monkeypatch.setattr("stave.train.precision.best_precision", lambda device: (None, "no bf16 here"))

    class Runner(FakeRunner):
        def __init__(self, *_args: Any) -> None:
            super().__init__()
            self.image_inputs, self.window_s = True, 1.0

    def interrupted(*_args: Any, **_kwargs: Any) -> Any:
        from stave.bench.result import LadderIncomplete

        partial = types.SimpleNamespace(final=REFERENCE.with_changes(batch_size=64), best_speedup=None,
                                        chain_speedup=1.3, duration_s=60.0, incomplete="interrupted (Ctrl-C)",
                                        rungs=[types.SimpleNamespace(name="batch_size", status="kept",
                                                                     chosen=types.SimpleNamespace(label="batch 64",
                                                                                                  ratio=1.3))])
        raise LadderIncomplete(partial, KeyboardInterrupt())

    monkeypatch.setattr(O, "SessionRunner", Runner)
    monkeypatch.setattr(ladder, "run_ladder", interrupted)
    out = tmp_path / "oracle.json"
    assert O.main(["--out", str(out), "--no-compile", "--batches", "32,64,4096"]) == 130
    doc = json.loads(out.read_text())
    assert doc["incomplete"] == "interrupted (Ctrl-C)" and doc["schema"] == O.SCHEMA
    assert set(doc["stages"]) == {"screen", "refine", "compile", "ladder"} and len(doc["stages"]["screen"]["points"]) == 8
    # The ladder's rungs climbed before Ctrl-C are kept.
    assert doc["stages"]["ladder"]["kept_rungs"] == ["batch_size (batch 64, 1.30x)"]
    assert doc["stages"]["ladder"]["kept_so_far"] == "batch 64, 0 workers, fp32"
    assert any("4096" in note for note in doc["grid"]["skipped"])
    assert not list(tmp_path.glob("*.tmp"))


def test_the_docs_block_names_the_fraction_the_machine_and_the_load(tmp_path: Path) -> None:
    doc, _ = run(FakeRunner(), REFERENCE.with_changes(batch_size=64))
    doc = {**doc, "command": "python -m benchmarks.ladder_oracle", "machine": {"device_name": "CPU X",
           "cores_usable": 2, "torch": "2.x", "load_avg_1m": 3.5}, "grid": {"points": len(GRID), "skipped": ["a"]}}
    text = O.docs_markdown(doc)
    fraction = doc["stages"]["final"]["fraction"]
    assert f"runs at {fraction:.3f} of the grid's best" in text and "**not met**" in text
    assert "CPU X, 2 usable cores" in text and "a shared machine" in text
    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmarks\n\nbefore\n")
    O.write_docs(doc, page)
    O.write_docs(doc, page)  # rewritten in place, not appended twice
    written = page.read_text()
    assert written.count(O.DOCS_BEGIN) == 1 and written.count(O.DOCS_END) == 1 and "before" in written


def test_without_the_final_round_the_docs_give_an_indirect_estimate_labelled_as_such() -> None:
    doc, _ = run(FakeRunner(), REFERENCE.with_changes(batch_size=64))
    stages = {k: v for k, v in doc["stages"].items() if k != "final"}
    stages["ladder"] = {**stages["ladder"], "best_speedup": 1.2}
    text = O.docs_markdown({**doc, "stages": stages, "incomplete": "interrupted (Ctrl-C)"})
    top = max(p["x_reference"] for name in ("refine", "compile") for p in stages[name]["points"])
    assert f"= {1.2 / top:.2f} (windows timed at different times: not the goal's measure)" in text
    assert "Incomplete: interrupted (Ctrl-C)." in text and "of the grid's best**" not in text
