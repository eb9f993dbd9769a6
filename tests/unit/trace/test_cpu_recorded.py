"""CPU-only traces recorded here with torch.profiler (and with ProfileWindow) on a tiny training loop."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from stave.trace.analysis import analyze_trace
from stave.capture.profile_window import ProfileWindow

STEPS = 4


def train_steps(on_step) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(STEPS * 16, 64), torch.randint(0, 10, (STEPS * 16,)))
    for x, y in DataLoader(data, batch_size=16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        on_step()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("cpu") / "cpu.pt.trace.json"
    # As users record it: a schedule (which makes the ProfilerStep#N markers) and an export handler.
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=STEPS - 1, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule,
                                on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        train_steps(prof.step)
    return path, prof.key_averages()


def test_cpu_split(recorded) -> None:
    path, _ = recorded
    a = analyze_trace(path)
    assert a.kind == "cpu" and a.gpu is None and a.steps_marked
    assert a.step_count == STEPS - 1
    assert a.parts == ("dataloader", "optimizer", "backward", "forward", "other")
    for s in a.steps:
        assert sum(s.parts_s.values()) == pytest.approx(s.duration_s, abs=1e-9)
    full = a.steps
    assert all(s.parts_s["dataloader"] > 0 for s in full)
    assert all(s.parts_s["backward"] > 0 for s in full)
    assert all(s.parts_s["optimizer"] > 0 for s in full)
    assert all(s.parts_s["forward"] > 0 for s in full)


def test_top_ops_match_key_averages(recorded) -> None:
    path, averages = recorded
    a = analyze_trace(path)
    torch_self_us = {e.key: e.self_cpu_time_total for e in averages}
    torch_calls = {e.key: e.count for e in averages}
    assert len(a.top_ops) == 10
    for o in a.top_ops[:5]:
        assert o.calls <= torch_calls[o.name]
        assert o.self_s * 1e6 == pytest.approx(torch_self_us[o.name], rel=0.15, abs=5.0)


def test_profile_window_records_steps(tmp_path: Path) -> None:
    window = ProfileWindow(tmp_path / "prof", steps=3)
    window.start()
    assert window.active
    count = {"n": 0}

    def on_step() -> None:
        count["n"] += 1
        if count["n"] <= 3:
            window.step()

    train_steps(on_step)
    out = window.stop()
    assert out is not None and out.exists() and out.name.endswith(".json.gz")
    assert not window.active and window.stop() is None
    a = analyze_trace(out)
    assert a.kind == "cpu" and a.step_count == 3
    assert not list(out.parent.glob(".profile.*"))  # no temporary file left behind


def test_profile_window_rejects_zero_steps(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        ProfileWindow(tmp_path, 0)


def test_profile_window_stopped_early_still_exports(tmp_path: Path) -> None:
    window = ProfileWindow(tmp_path / "early", steps=10)
    window.start()
    x = torch.randn(64, 64)
    for _ in range(2):
        (x @ x).sum()
        window.step()
    (x @ x).sum()
    out = window.stop()
    assert out is not None and analyze_trace(out).step_count >= 2
