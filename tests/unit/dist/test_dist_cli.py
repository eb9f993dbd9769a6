"""The distributed options of ``stave doctor``: bad usage, the torchrun command line, ``--merge``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from dist_factory import StepShape, record

from stave.cli import main
from stave.dist import rundir
from stave.dist.launch import LaunchOptions, torchrun_argv
from stave.errors import UsageError
from stave.files import atomic_write_json
from stave.report.doctor_json import doctor_json_errors

# jsonschema would import this optional checker (slow to import); the schemas use no "format".
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def single_process(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_STEP_ID"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--merge", "d", "train.py"], "takes no script"),
        (["--nnodes", "2", "train.py"], "--nnodes is a torchrun option"),
        (["--nproc-per-node", "0", "train.py"], "--nproc-per-node must be"),
        (["--nproc-per-node", "2", "--record-interval", "30", "train.py"], "--record-interval"),
        (["--nproc-per-node", "2", "--profile-steps", "2", "train.py"], "--profile-steps is for one process"),
        (["--nproc-per-node", "2", "--nnodes", "x", "train.py"], "--nnodes must be"),
        (["--nproc-per-node", "2", "no_such_script.py"], "script not found"),
        (["--run-dir", "d", "train.py"], "--run-dir is for several processes"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("pass\n")
    assert main(["doctor", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_several_nodes_need_a_shared_run_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("pass\n")
    assert main(["doctor", "--nproc-per-node", "1", "--nnodes", "2", "train.py"]) == 2
    assert "--run-dir" in capsys.readouterr().err


def test_torchrun_gets_the_users_rendezvous_options_unchanged() -> None:
    from torch.distributed import run as torchrun

    opts = LaunchOptions(nproc_per_node="4", nnodes="2", node_rank=1, rdzv_backend="c10d",
                         rdzv_endpoint="head:29400", rdzv_id="job9", max_restarts=2)
    argv = torchrun_argv(opts, ["doctor", "--run-dir", "/shared/run", "--no-merge", "--", "train.py", "--lr", "1"])
    args = torchrun.parse_args(argv)  # torchrun's own parser accepts it as a user would type it
    assert (args.nproc_per_node, args.nnodes, args.node_rank) == ("4", "2", 1)
    assert (args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id, args.max_restarts) == ("c10d", "head:29400", "job9", 2)
    assert args.module and args.training_script == "stave"
    assert args.training_script_args == ["doctor", "--run-dir", "/shared/run", "--no-merge", "--", "train.py",
                                         "--lr", "1"]
    with pytest.raises(UsageError):
        LaunchOptions(nproc_per_node="2", master_port=70000)


def test_merge_reports_every_rank_including_killed_and_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    run_dir = tmp_path / "run"
    killed = record(1, world=3, shapes=[StepShape(100, fwd=40, bwd=50)] * 6, stopped_by="running",
                    hostname="elsewhere")
    killed.dist.record_interval_s = 0.1
    for rec in (record(0, world=3), killed):
        atomic_write_json(rundir.record_path(run_dir, rec.run.rank), rec.to_dict(), indent=None)
    old = 1_000_000.0
    import os

    os.utime(rundir.record_path(run_dir, 1), (old, old))  # no rewrite for ages: that rank is gone
    js = tmp_path / "merged.json"
    code = main(["doctor", "--merge", str(run_dir), "--json", str(js)])
    assert code == 1  # a rank failed: like a failing script, not 0
    report = json.loads(js.read_text())
    assert doctor_json_errors(report) == []
    assert [(r["rank"], r["status"]) for r in report["ranks"]] == [(0, "ok"), (1, "killed"), (2, "missing")]
    assert report["ranks"][1]["total_steps"] == 6 and report["ranks"][2]["step_time_s"]["median"] is None
    failed = [f for f in report["findings"] if f["id"] == "RANK_FAILED"][0]
    assert failed["rank"] == 1 and failed["evidence"]["missing_ranks"] == [2]
    out = capsys.readouterr().out
    assert "Ranks (3)" in out and "killed" in out and "missing" in out


def test_merge_of_an_empty_directory_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--merge", str(tmp_path)]) == 2
    assert "no rank records" in capsys.readouterr().err
