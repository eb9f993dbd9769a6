"""A new ladder rung is one file: dropped into stave.bench.added_rungs, it flows through.

The rung file below declares its training-step setting (a Switch: default, not numeric, how
build_step applies it, the code it prints) and its plan (@rung). Nothing else is edited: the ladder
finds the file, places the rung, applies the setting, keeps it when faster, and prints its code.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest
import torch

import tiny_job
from stave.bench import added_rungs
from stave.bench import compare as cmp
from stave.bench import mfu as M
from stave.bench import rungs as R
from stave.bench.compare import Comparison, TimingPlan
from stave.bench.ladder import LadderOptions, run_ladder
from stave.bench.session import Window
from stave.bench.settings import RunConfig
from stave.report.bench_json import load_schema, to_json
from stave.train import switches
from stave.train.config import TrainConfig
from stave.train.step import build_step

RUNG_FILE = '''
"""An example rung: marks the model (not numeric: the step computes the same)."""
from stave.bench.rungs import Plan, rung
from stave.train.switches import Switch, register_switch


def _apply(model, device, on):
    model.stave_example_marked = on
    return model


register_switch(Switch("example_mark", default=False, numeric=False, apply=_apply,
                       code=lambda on: [f"model.example_mark = {on}  # the example rung's line"]))


@rung("example_mark", "example: mark the model", before="input_again")
def plan_example_mark(ctx, current):
    if dict(current.train.extras).get("example_mark"):
        return Plan.skipped("already marked")
    return Plan("single", (("mark the model", {"example_mark": True}),))
'''

OPTIONS = LadderOptions(quick=True, device="cpu", timing=TimingPlan(warmup_steps=1, pairs=3, max_pairs=3, min_steps=1, min_s=0.0))


@pytest.fixture
def rung_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The rung file in a directory the added_rungs package also reads; registries restored after."""
    (tmp_path / "example_mark.py").write_text(textwrap.dedent(RUNG_FILE))
    monkeypatch.setattr(added_rungs, "__path__", [*added_rungs.__path__, str(tmp_path)])
    monkeypatch.setattr(R, "_ADDED", {})
    monkeypatch.setattr(switches, "_SWITCHES", {})
    monkeypatch.delitem(sys.modules, "stave.bench.added_rungs.example_mark", raising=False)
    yield tmp_path / "example_mark.py"
    sys.modules.pop("stave.bench.added_rungs.example_mark", None)


def test_the_rung_is_found_and_placed(rung_file: Path) -> None:
    names = [r.name for r in R.default_rungs(tiny_job.spec())]
    assert names.index("example_mark") == names.index("input_again") - 1
    assert names.count("example_mark") == 1


def test_the_setting_is_a_config_setting_applied_and_printed(rung_file: Path) -> None:
    R.default_rungs(tiny_job.spec())  # loads the rung file
    config = RunConfig(batch_size=8).with_changes(example_mark=True)
    assert config.train.extras == (("example_mark", True),)
    assert config.to_dict()["example_mark"] is True
    assert config.changes_from(RunConfig(batch_size=8)) == {"example_mark": True}
    # Back to the default: nothing extra is kept (equal configs hash equal).
    assert config.with_changes(example_mark=False) == RunConfig(batch_size=8)
    # Not numeric: the ladder skips its loss check as trivially exact.
    assert "example_mark" not in RunConfig.numeric_settings()
    step = build_step(torch.nn.Linear(2, 1), lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
                      torch.nn.functional.mse_loss, config.train, "cpu")
    assert step.model.stave_example_marked is True
    with pytest.raises(Exception, match="not a setting"):
        TrainConfig().with_changes(no_such_setting=True)


def test_the_ladder_climbs_it_and_prints_its_code(rung_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def speed(c: RunConfig) -> float:
        return 100.0 * (1.5 if dict(c.train.extras).get("example_mark") else 1.0)

    def fake_compare(a, b, plan, min_gain=None) -> Comparison:
        jitter = (1.0, 1.01, 0.99)
        wa = tuple(Window(1, int(speed(a.config) * 1000 * j), 10**9, 0, None) for j in jitter)
        wb = tuple(Window(1, int(speed(b.config) * 1000 * j), 10**9, 0, None) for j in jitter)
        return Comparison(wa, wb)

    monkeypatch.setattr(cmp, "compare", fake_compare)
    monkeypatch.setattr(M, "cpu_peak_flops", lambda dtype: 1e11)
    spec = tiny_job.spec()
    ladder = [r for r in R.default_rungs(spec) if r.name == "example_mark"]
    result = run_ladder(spec, OPTIONS, ladder)
    row = next(r for r in result.rungs if r.name == "example_mark")
    assert row.status == "kept" and row.chosen.loss_passed
    assert dict(result.final.train.extras) == {"example_mark": True}
    assert "model.example_mark = True  # the example rung's line" in result.code
    assert ".with_changes(example_mark=True)" in result.code
    data = json.loads(json.dumps(to_json(result)))
    assert data["final_config"]["example_mark"] is True
    jsonschema.validate(data, load_schema())
