"""The child process end to end: a tiny script run with and without fixes, its steps, losses and input statistics."""

from __future__ import annotations

from pathlib import Path

import pytest

from stave.capture.runner import Target
from stave.inject.launch import ChildRun, run_child
from stave.inject.selection import request, selection

SCRIPT = '''
import sys, torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
torch.set_num_threads(2)
ds = TensorDataset(torch.randn(256, 3, 6, 6), torch.randint(0, 4, (256,)))
loader = DataLoader(ds, batch_size=16, shuffle=True)
model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
if "--crash" in sys.argv:
    raise RuntimeError("planted crash")
if "--hard-exit" in sys.argv:
    import os
    for x, y in loader:
        opt.zero_grad(); nn.functional.cross_entropy(model(x), y).backward(); opt.step()
    os._exit(3)
for epoch in range(2):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
'''


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


@pytest.mark.slow  # two child processes, each importing torch: ~10 s on a loaded 2-core machine
def test_child_runs_the_script_with_and_without_fixes(script: Path, tmp_path: Path) -> None:
    base = run_child(ChildRun(Target(str(script)), steps=6), tmp_path / "w", "base")
    fixed = run_child(ChildRun(Target(str(script)), selection(request("batched_fetch"), request("threads", threads=1)),
                               steps=6), tmp_path / "w", "fixed")
    assert base.ok and fixed.ok, (base.error, base.stderr_tail, fixed.stderr_tail)
    assert base.stopped_by == "steps" and len(base.step_end_s) == 6 and base.samples == [16] * 6
    assert len(base.step_times_s(2)) == 3 and base.median_step_s(2) > 0
    # Same seeds, same samples in the same order: the fixes keep the losses and inputs exactly.
    assert len(base.losses) == 4 and base.losses == pytest.approx(fixed.losses, rel=1e-5)
    assert base.input_stats is not None and len(base.input_stats) == 3
    flat = [v for row in base.input_stats for v in row]
    assert flat == pytest.approx([v for row in fixed.input_stats for v in row], rel=1e-6)
    assert {f["id"]: f["status"] for f in fixed.fixes} == {"batched_fetch": "applied", "threads": "applied"}


def test_a_crashing_script_is_reported_not_raised(script: Path, tmp_path: Path) -> None:
    result = run_child(ChildRun(Target(str(script), ("--crash",)), steps=4), tmp_path, "crash")
    assert not result.ok and result.exit_code == 1
    assert "planted crash" in (result.error or "") and "planted crash" in result.stderr_tail


def test_a_script_ending_in_os_exit_still_gives_its_result(script: Path, tmp_path: Path) -> None:
    # The steps it ran are measured and the result written before the child leaves as it asked.
    result = run_child(ChildRun(Target(str(script), ("--hard-exit",)), steps=100), tmp_path, "hard")
    assert result.exit_code == 3 and result.stopped_by == "error"
    assert len(result.step_end_s) == 16
