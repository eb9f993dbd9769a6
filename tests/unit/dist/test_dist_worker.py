"""One rank's run: records written at start, periodically and at the end; SIGTERM; the process group."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from stave.capture.runner import Target
from stave.dist import rundir
from stave.dist.env import DistEnv
from stave.dist.worker import shutdown_process_group, sigterm_interrupts
from stave.doctor.rank import run_rank

SCRIPT = """
import sys, time, torch
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 1)), batch_size=16, shuffle=True)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    time.sleep(float(sys.argv[1]))
    loss = (model(x) - y).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
"""


def env(rank: int = 1) -> DistEnv:
    return DistEnv(rank=rank, local_rank=rank, world_size=2, node_rank=0, run_id="unit", launch_id="L",
                   restart_count=0, source="torchrun")


def test_a_rank_records_itself_and_its_ending(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    run = run_rank(Target(str(script), ("0.0",)), env(), tmp_path, steps=6, warmup=1, probes=False,
                   record_interval_s=0.2)
    assert run.record_path == rundir.record_path(tmp_path, 1) and run.outcome.stopped_by == "steps"
    data = json.loads(run.record_path.read_text())
    assert data["run"]["rank"] == 1 and data["run"]["world_size"] == 2 and data["run"]["stopped_by"] == "steps"
    assert data["run"]["script_exit_code"] == 0 and len(data["steps"]) == 6
    assert data["dist"]["run_id"] == "unit" and data["dist"]["launch_id"] == "L"
    loader = data["config"]["loaders"][0]
    # Six batches of 16 were drawn before --steps stopped the script: a permutation's first 96.
    assert len(loader["first_indices"]) == 96 and len(set(loader["first_indices"])) == 96
    assert all(0 <= i < 256 for i in loader["first_indices"])
    assert loader["epoch_samples"] == 256


def test_the_periodic_record_starts_at_once_and_names_the_rank(tmp_path: Path) -> None:
    """While the script runs, the record is already there (a rank killed now would be named)."""
    import threading

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    seen: list[dict] = []

    def watch() -> None:
        path = rundir.record_path(tmp_path, 1)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not seen:
            if path.exists():
                data = json.loads(path.read_text())
                if data["run"]["stopped_by"] == "running" and data["steps"]:
                    seen.append(data)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    run_rank(Target(str(script), ("0.05",)), env(), tmp_path, steps=14, warmup=1, probes=False,
             record_interval_s=0.2)
    watcher.join()
    assert seen, "no periodic record with steps appeared while the script ran"
    partial = seen[0]
    assert partial["run"]["hostname"] and partial["run"]["pid"] == os.getpid()
    assert partial["config"]["loaders"] and partial["config"]["loaders"][0]["first_indices"]


def test_sigterm_interrupts_the_script_only_while_armed() -> None:
    with sigterm_interrupts() as state:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        state.armed = False
        os.kill(os.getpid(), signal.SIGTERM)  # during the wrap-up: noted, not raised
        time.sleep(0.05)
        assert state.fired
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_the_process_group_left_up_by_a_script_is_destroyed() -> None:
    assert shutdown_process_group() is False
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    assert shutdown_process_group() is True and not dist.is_initialized()
