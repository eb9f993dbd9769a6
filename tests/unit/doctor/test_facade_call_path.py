"""``stave doctor``, ``stave.watch()``, each distributed rank and the merge all go through the doctor facade.

A spy wraps :class:`stave.doctor.facade.Doctor` and :func:`stave.doctor.facade.diagnose` (calling
through), and each entry point runs a tiny CPU loop: the test fails if an entry point measures with
its own session or diagnoses with its own composition of the rules.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import stave
from stave.capture.runner import Target
from stave.cli import main
from stave.dist.env import DistEnv
from stave.doctor import facade
from stave.doctor.rank import run_rank

SCRIPT = """
import torch
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    loss = (model(x) - y).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
"""


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    calls: dict[str, list[Any]] = {"stop": [], "diagnose": []}
    real_stop = facade.Doctor.stop
    real_diagnose = facade.diagnose

    def stop(self: facade.Doctor, outcome: Any = None) -> Any:
        record = real_stop(self, outcome)
        calls["stop"].append(record)
        return record

    def diagnose(records: Any, statuses: Any = None, trace_path: Any = None) -> Any:
        result = real_diagnose(records, statuses, trace_path)
        calls["diagnose"].append(result)
        return result

    monkeypatch.setattr(facade.Doctor, "stop", stop)
    monkeypatch.setattr(facade, "diagnose", diagnose)
    return calls


def test_stave_doctor_measures_and_diagnoses_through_the_facade(tmp_path: Path, spy: dict[str, list[Any]]) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "report.json"
    code = main(["doctor", "--steps", "5", "--warmup", "1", "--no-probes", "--quiet", "--json", str(out), str(script)])
    assert code == 0
    assert len(spy["stop"]) == 1 and len(spy["diagnose"]) == 1
    # What was written is the facade's result, not a second diagnosis.
    result = spy["diagnose"][0]
    report = json.loads(out.read_text())
    assert report["summary"]["steps"] == result.summary.steps == 4
    assert [f["id"] for f in report["findings"]] == [f.id for f in result.findings]


def test_watch_measures_and_diagnoses_through_the_facade(spy: dict[str, list[Any]]) -> None:
    import torch

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with stave.watch(steps=4, warmup=1, probes=False) as run:
        for _ in range(10):
            model(torch.randn(8, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
    result = run.result()
    assert spy["stop"] == [run.record] and spy["diagnose"] == [result]
    assert result.summary.steps == 3 and run.result() is result  # computed once


def test_a_rank_measures_through_the_facade_and_the_merge_diagnoses_through_it(
        tmp_path: Path, spy: dict[str, list[Any]]) -> None:
    from stave.dist.merge import collect

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    for rank in (0, 1):
        env = DistEnv(rank=rank, local_rank=rank, world_size=2, node_rank=0, run_id="unit", launch_id="L",
                      restart_count=0, source="torchrun")
        run = run_rank(Target(str(script)), env, tmp_path, steps=4, warmup=1, probes=False, record_interval_s=1.0)
        assert spy["stop"][-1] is run.record and run.record.run.rank == rank
    assert len(spy["stop"]) == 2 and not spy["diagnose"]
    result = facade.merged_result(collect(tmp_path))
    assert spy["diagnose"] == [result]
    assert [r.rank for r in result.ranks] == [0, 1] and all(r.status == "ok" for r in result.ranks)


def test_the_result_carries_what_the_renderers_show(spy: dict[str, list[Any]]) -> None:
    """Pipeline summary and hot lines are computed once, with the result; the JSON shows those."""
    from stave.report.doctor_json import doctor_json

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8, num_workers=0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with stave.watch(steps=6, warmup=1, probes=False) as run:
        for (x,) in loader:
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
    result = run.result()
    report = doctor_json(result)
    assert [(h["file"], h["line"]) for h in report["hot_lines"]] == [(h.file, h.line) for h in result.hot_lines]
    io = report["data_pipeline"]["io"]
    assert (io is None) == (result.pipeline is None)
    if result.pipeline is not None:
        assert io["samples"] == result.pipeline.samples
