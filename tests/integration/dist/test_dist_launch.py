"""The distributed doctor end to end: 2-process DDP with gloo on CPU, launched every supported way.

Each test starts real processes (torchrun's agent and its ranks), so they carry the ``dist``
marker. The planted scripts are in tests/planted_dist/.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from stave.report.doctor_json import doctor_json_errors

PLANTED = Path(__file__).resolve().parents[2] / "planted_dist"
DDP_SCRIPT = str(PLANTED / "ddp_train.py")
# Generous: four processes import torch on two shared cores.
RUN_TIMEOUT_S = 240

pytestmark = pytest.mark.dist


def stave(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stave", *args], env=env, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)


@pytest.fixture
def env(stave_env: dict[str, str]) -> dict[str, str]:
    out = dict(stave_env)
    out["COLUMNS"] = "160"  # the terminal report's rank table, unabridged
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_STEP_ID"):
        out.pop(name, None)
    return out


def findings(report: dict) -> dict[str, dict]:
    return {f["id"]: f for f in report["findings"]}


def leftover_processes(marker: str) -> list[str]:
    """Processes whose command line mentions ``marker`` (a unique run directory)."""
    out = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if marker in cmd:
            out.append(f"{proc.pid}: {cmd}")
    return out


def test_launcher_names_the_straggler_and_reports_every_rank(tmp_path: Path, env: dict[str, str]) -> None:
    run_dir, js, html = tmp_path / "run", tmp_path / "r.json", tmp_path / "r.html"
    res = stave(env, "doctor", "--nproc-per-node", "2", "--steps", "12", "--warmup", "2", "--no-probes",
                "--run-dir", str(run_dir), "--json", str(js), "--html", str(html),
                DDP_SCRIPT, "--straggler-rank", "1", "--delay-ms", "60", "--user-hook")
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads(js.read_text())
    assert doctor_json_errors(report) == []
    ranks = report["ranks"]
    assert [(r["rank"], r["status"]) for r in ranks] == [(0, "ok"), (1, "ok")]
    # Rank 0 waits in the all-reduce for rank 1, which waits for its data.
    assert ranks[0]["comm_wait_s"] > ranks[1]["comm_wait_s"] + 0.02
    assert ranks[1]["breakdown"]["data_wait"] > max(0.25, 5 * ranks[0]["breakdown"]["data_wait"])
    found = findings(report)
    straggler = found["RANK_STRAGGLER"]
    assert straggler["rank"] == 1 and straggler["evidence"]["cause"] == "data_wait"
    assert "NO_DISTRIBUTED_SAMPLER" not in found  # the script shards with DistributedSampler
    # The user's own comm hook ran (it prints on its first call) and is what was timed.
    assert "rank 0: user comm hook called" in res.stdout and "rank 1: user comm hook called" in res.stdout
    rec = json.loads((run_dir / "rank-00001.json").read_text())
    assert rec["dist"]["comm_hook"].endswith("counting_hook") and rec["run"]["stopped_by"] == "steps"
    # Every rank side by side, in the terminal and the HTML.
    pids = [f"{r['hostname']}:{r['pid']}" for r in ranks]
    assert "Ranks (2)" in res.stdout and all(p in res.stdout for p in pids)
    page = html.read_text()
    assert "Ranks (2)" in page and all(p in page for p in pids)
    assert leftover_processes(str(run_dir)) == []


def test_inside_a_user_torchrun_rank0_merges_and_finds_the_missing_sampler(tmp_path: Path,
                                                                           env: dict[str, str]) -> None:
    run_dir, js = tmp_path / "run", tmp_path / "r.json"
    res = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "stave", "doctor",
         "--steps", "10", "--warmup", "2", "--no-probes", "--quiet", "--run-dir", str(run_dir), "--json", str(js),
         DDP_SCRIPT, "--sampler", "none", "--accum", "2"],
        env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads(js.read_text())
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    found = findings(report)
    sampler = found["NO_DISTRIBUTED_SAMPLER"]
    assert sampler["est_speedup"] == pytest.approx(2.0) and sampler["evidence"]["shared_indices"] > 100
    # In-memory data, built alike on both ranks: the sample digests prove the samples equal.
    assert sampler["evidence"]["same_sample_digests"] is True and sampler["certain"] is True
    # The other rank and torchrun's agent are the job, not a busy machine: measured apart, and
    # MACHINE_BUSY (if another job really was running) counts only what is left.
    rec = json.loads((run_dir / "rank-00000.json").read_text())
    assert any((h.get("cpu_job_ranks_pct") or 0) > 10 for h in rec["host"])
    if "MACHINE_BUSY" in found:
        assert found["MACHINE_BUSY"]["evidence"]["job_ranks_cores"] > 0.1
    assert found["GRAD_ACCUM_NO_SYNC"]["evidence"]["syncs_per_step"] == 2


def test_a_killed_rank_is_reported_with_what_it_measured(tmp_path: Path, env: dict[str, str]) -> None:
    run_dir, js = tmp_path / "run", tmp_path / "r.json"
    res = stave(env, "doctor", "--nproc-per-node", "2", "--steps", "60", "--warmup", "2", "--no-probes",
                "--record-interval", "0.5", "--run-dir", str(run_dir), "--json", str(js),
                DDP_SCRIPT, "--kill-rank", "1", "--kill-step", "30", "--straggler-rank", "0", "--delay-ms", "30")
    assert res.returncode == 128 + 9, res.stderr[-3000:]  # SIGKILL, passed through like a script's code
    report = json.loads(js.read_text())
    status = {r["rank"]: r for r in report["ranks"]}
    assert status[1]["status"] == "killed" and status[1]["total_steps"] > 0
    assert status[0]["status"] in ("crashed", "interrupted") and status[0]["total_steps"] >= 29
    failed = findings(report)["RANK_FAILED"]
    assert failed["rank"] == 1 and failed["evidence"]["failed_ranks"]["1"]["steps_measured"] > 0
    assert leftover_processes(str(run_dir)) == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_nodes_on_localhost_merge_into_one_report(tmp_path: Path, env: dict[str, str]) -> None:
    run_dir, port = tmp_path / "shared-run", _free_port()
    procs = []
    for node in (0, 1):
        cmd = [sys.executable, "-m", "stave", "doctor", "--nnodes", "2", "--node-rank", str(node),
               "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
               "--rdzv-id", "stave-test", "--steps", "8", "--warmup", "2", "--no-probes", "--record-interval", "1",
               "--run-dir", str(run_dir), "--json", str(tmp_path / f"node{node}.json"),
               DDP_SCRIPT, "--sampler", "custom"]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=RUN_TIMEOUT_S) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[1][-2000:] for o in outs)
    written = [n for n in (0, 1) if (tmp_path / f"node{n}.json").exists()]
    assert len(written) == 1  # the node that ran rank 0 merges; the other says so
    other = 1 - written[0]
    assert "writes the merged report" in outs[other][1]
    report = json.loads((tmp_path / f"node{written[0]}.json").read_text())
    assert [(r["rank"], r["status"]) for r in report["ranks"]] == [(0, "ok"), (1, "ok")]
    assert "NO_DISTRIBUTED_SAMPLER" not in findings(report)  # a custom shard-aware sampler: no false alarm
    records = [json.loads((run_dir / f"rank-0000{r}.json").read_text()) for r in (0, 1)]
    assert {rec["dist"]["run_id"] for rec in records} == {"stave-test"}
    assert len({rec["dist"]["launch_id"] for rec in records}) == 2  # one launcher per node


def test_dataparallel_in_one_process_is_named(tmp_path: Path, env: dict[str, str]) -> None:
    js = tmp_path / "r.json"
    res = stave(env, "doctor", "--steps", "8", "--no-probes", "--quiet", "--json", str(js),
                str(PLANTED / "dataparallel.py"))
    assert res.returncode == 0, res.stderr[-3000:]
    found = findings(json.loads(js.read_text()))
    assert found["DATAPARALLEL_USED"]["severity"] == "info" and found["DATAPARALLEL_USED"]["est_speedup"] == 1.0
