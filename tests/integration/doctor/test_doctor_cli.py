"""`stave doctor` end to end on small scripts: results unchanged, clean stops, faults, exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.slow


def test_losses_bitwise_equal_and_json_valid(train_script: Path, tmp_path: Path, stave_env: dict[str, str], run_stave) -> None:
    plain = tmp_path / "plain.txt"
    doctored = tmp_path / "doctored.txt"
    subprocess.run([sys.executable, str(train_script), "--steps", "12", "--losses", str(plain)],
                   env=stave_env, check=True, timeout=120)
    out = tmp_path / "report.json"
    proc = run_stave(["doctor", "--json", str(out), "--timeline", str(tmp_path / "tl.json"),
                      "--flamegraph", str(tmp_path / "flame.txt"), "--html", str(tmp_path / "r.html"),
                      str(train_script), "--steps", "12", "--losses", str(doctored)], stave_env)
    assert proc.returncode == 0, proc.stderr
    # FLOPs were counted on one of these steps, hooks timed all of them: the numbers are identical.
    assert plain.read_text() == doctored.read_text()
    report = json.loads(out.read_text())
    from stave.report.doctor_json import validate_doctor_json

    validate_doctor_json(report)
    assert report["run"]["script_exit_code"] == 0
    assert report["summary"]["steps"] >= 6
    shares = report["summary"]["breakdown"]
    assert abs(sum(shares.values()) - 1.0) < 1e-6
    assert shares["forward"] > 0 and shares["backward"] > 0 and shares["optimizer"] > 0
    timeline = json.loads((tmp_path / "tl.json").read_text())
    assert any(e.get("name") == "forward" for e in timeline["traceEvents"])
    assert "Step time" in proc.stdout
    assert (tmp_path / "r.html").read_text().lstrip().lower().startswith("<!doctype html")


def test_steps_stops_cleanly_and_leaves_no_worker(train_script: Path, tmp_path: Path, stave_env: dict[str, str], run_stave) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    proc = run_stave(["doctor", "--quiet", "--no-probes", "--json", str(tmp_path / "r.json"), "--steps", "8",
                      str(train_script), "--steps", "1000", "--workers", "2", "--pids", str(pids)], stave_env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["run"]["stopped_by"] == "steps"
    worker_pids = [int(name.split("-")[1]) for name in os.listdir(pids)]
    assert len(worker_pids) >= 2
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(p) for p in worker_pids):
        time.sleep(0.2)
    assert not any(_alive(p) for p in worker_pids)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_script_error_keeps_report_and_exit_code(train_script: Path, tmp_path: Path, stave_env: dict[str, str], run_stave) -> None:
    out = tmp_path / "r.json"
    proc = run_stave(["doctor", "--no-probes", "--json", str(out), "--fail-on", "info", str(train_script),
                      "--steps", "20", "--raise-at", "9"], stave_env)
    assert proc.returncode == 1
    assert "RuntimeError: planted failure at step 9" in proc.stderr
    assert "stave/capture" not in proc.stderr  # the user's traceback, not ours
    report = json.loads(out.read_text())
    assert report["run"]["script_exit_code"] == 1 and report["run"]["stopped_by"] == "error"
    assert report["summary"]["steps"] >= 1


def test_script_exit_code_wins(train_script: Path, tmp_path: Path, stave_env: dict[str, str], run_stave) -> None:
    proc = run_stave(["doctor", "--quiet", "--no-probes", str(train_script), "--steps", "8", "--exit-code", "3"],
                     stave_env)
    assert proc.returncode == 3


def test_script_ending_in_os_exit_keeps_report_and_exit_code(tmp_path: Path, stave_env: dict[str, str], run_stave) -> None:
    # Scripts end with os._exit to skip a process group's teardown; the doctor runs in their process.
    script = tmp_path / "hard.py"
    script.write_text("import os, torch\nm = torch.nn.Linear(8, 8)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
                      "for _ in range(12):\n    opt.zero_grad(); m(torch.ones(4, 8)).sum().backward(); opt.step()\n"
                      "os._exit(5)\n")
    out = tmp_path / "r.json"
    proc = run_stave(["doctor", "--quiet", "--no-probes", "--json", str(out), str(script)], stave_env)
    assert proc.returncode == 5, proc.stderr
    report = json.loads(out.read_text())
    assert report["run"]["script_exit_code"] == 5 and report["summary"]["steps"] >= 6


def test_bad_input_is_one_line_and_exit_2(train_script: Path, tmp_path: Path, stave_env: dict[str, str], run_stave) -> None:
    proc = run_stave(["doctor", str(tmp_path / "missing.py")], stave_env)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "script not found" in proc.stderr
    proc = run_stave(["doctor", "-m", "no_such_module_for_stave"], stave_env)
    assert proc.returncode == 2 and "no module named" in proc.stderr
    blocker = tmp_path / "file"
    blocker.write_text("x")
    marker = tmp_path / "progress"
    proc = run_stave(["doctor", "--json", str(blocker / "r.json"), str(train_script), "--progress", str(marker)],
                     stave_env)
    assert proc.returncode == 2 and "--json" in proc.stderr
    assert not marker.exists()  # refused before the run started
    proc = run_stave(["doctor"], stave_env)
    assert proc.returncode == 2


def test_ctrl_c_writes_report(train_script: Path, tmp_path: Path, stave_env: dict[str, str], run_stave) -> None:
    out = tmp_path / "r.json"
    marker = tmp_path / "progress"
    # A test run started in the background by a shell without job control inherits SIGINT as
    # ignored, and Python keeps it so: give the child the default disposition, as a terminal would.
    proc = subprocess.Popen([sys.executable, "-m", "stave", "doctor", "--quiet", "--json", str(out),
                             str(train_script), "--steps", "100000", "--progress", str(marker)],
                            env=stave_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (marker.exists() and marker.read_text().strip() not in ("", "1", "2")):
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # never leave a training process behind for the next tests
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    report = json.loads(out.read_text())
    assert report["run"]["stopped_by"] == "interrupt"


def test_no_optimizer_step_says_so(tmp_path: Path, stave_env: dict[str, str], run_stave) -> None:
    script = tmp_path / "infer.py"
    script.write_text("import torch\nm = torch.nn.Linear(4, 4)\nfor _ in range(5):\n    m(torch.ones(2, 4))\n")
    out = tmp_path / "r.json"
    proc = run_stave(["doctor", "--no-probes", "--json", str(out), str(script)], stave_env)
    assert proc.returncode == 0, proc.stderr
    assert "optimizer.step()" in proc.stdout + proc.stderr
    assert json.loads(out.read_text())["summary"]["steps"] == 0


def test_module_mode(tmp_path: Path, stave_env: dict[str, str], train_script: Path, run_stave) -> None:
    pkg = tmp_path / "pkg_train"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(train_script.read_text())
    env = dict(stave_env, PYTHONPATH=str(tmp_path) + os.pathsep + stave_env["PYTHONPATH"])
    proc = run_stave(["doctor", "--quiet", "--no-probes", "--json", str(tmp_path / "r.json"), "-m", "pkg_train",
                      "--steps", "8"], env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "r.json").read_text())["summary"]["steps"] >= 1


def test_profile_steps_folds_the_trace_and_keeps_it(train_script: Path, tmp_path: Path, stave_env: dict[str, str], run_stave) -> None:
    env = dict(stave_env, TMPDIR=str(tmp_path))  # the kept trace lands under tmp_path
    out = tmp_path / "report.json"
    proc = run_stave(["doctor", "--no-probes", "--profile-steps", "2", "--json", str(out),
                      str(train_script), "--steps", "12"], env)
    assert proc.returncode == 0, proc.stderr
    assert "could not be analysed" not in proc.stderr
    report = json.loads(out.read_text())
    from stave.report.doctor_json import validate_doctor_json

    validate_doctor_json(report)
    assert report["trace"] is not None and report["trace"]["schema"] == "stave.trace/1"
    (trace,) = report["trace"]["traces"]
    assert trace["steps_marked"] and trace["step_count"] >= 1
    assert sum(s["parts_s"].get("forward", 0) for s in report["trace"]["steps"]) > 0
    kept = list(tmp_path.glob("stave-profile-*/profile.pt.trace.json.gz"))
    assert len(kept) == 1 and kept[0].stat().st_size > 0
    assert f"kept at {kept[0]} " in proc.stderr  # one unbroken path, to copy


def test_markup_in_script_arguments_is_printed_as_typed(train_script: Path, tmp_path: Path, stave_env: dict[str, str], run_stave) -> None:
    # A path argument that reads as rich markup (a closing tag) once crashed the "running ..." line.
    (tmp_path / "[").mkdir()
    losses = tmp_path / "[" / "red]"
    proc = run_stave(["doctor", "--no-probes", str(train_script), "--steps", "6", "--losses", str(losses)], stave_env)
    assert proc.returncode == 0, proc.stderr
    assert f"--losses {losses}" in proc.stderr and "internal error" not in proc.stderr
    assert losses.exists()
