"""`stave bench ladder` and `stave tune` from the command line: outputs, exit codes, error lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from stave.bench.report_json import load_schema

REPO = Path(__file__).resolve().parents[3]
TINY_DIR = REPO / "tests" / "unit" / "bench"


def env() -> dict[str, str]:
    out = dict(os.environ)
    out["PYTHONPATH"] = str(REPO / "src") + os.pathsep + out.get("PYTHONPATH", "")
    out.setdefault("OMP_NUM_THREADS", "2")
    return out


def stave(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stave", *args], cwd=TINY_DIR, env=env(), capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def ladder_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path_factory.mktemp("ladder")
    result = stave("bench", "ladder", "--job", "tiny_job:spec", "--quick", "--rungs", "batch_size,uint8",
                   "--json", str(out / "r.json"), "--html", str(out / "r.html"), "--png", str(out / "r.png"))
    return result, out


def test_ladder_writes_json_html_png_and_prints_table_and_code(ladder_run) -> None:
    result, out = ladder_run
    assert result.returncode == 0, result.stderr
    doc = json.loads((out / "r.json").read_text())
    jsonschema.validate(doc, load_schema())
    assert [r["name"] for r in doc["rungs"]] == ["baseline", "batch_size", "uint8"]
    assert (out / "r.png").read_bytes().startswith(b"\x89PNG")
    assert "<svg" in (out / "r.html").read_text()
    assert "stave bench ladder: tiny" in result.stdout and "fed ratio" in result.stdout
    assert "for inputs, targets in loader:" in result.stdout  # the final configuration as code
    assert "trying" in result.stderr  # progress goes to stderr, not into the data on stdout
    assert "trying" not in result.stdout


def test_tune_from_a_result_prints_only_the_code(ladder_run) -> None:
    result, out = ladder_run
    tuned = stave("tune", "--from", str(out / "r.json"))
    assert tuned.returncode == 0, tuned.stderr
    assert tuned.stdout == json.loads((out / "r.json").read_text())["code"]
    compile(tuned.stdout, "<tune>", "exec")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bench", "ladder", "--job", "no_such_mod:spec"], "cannot import 'no_such_mod'"),
        (["bench", "ladder", "--job", "tiny_job:not_a_spec"], "must return a stave.bench.JobSpec or a dict"),
        (["bench", "ladder", "--job", "tiny_job:spec", "--rungs", "warp_drive"], "--rungs: unknown rung(s) warp_drive"),
        (["bench", "ladder", "--job", "tiny_job:spec", "--pairs", "2"], "at least 3 windows"),
        (["bench", "ladder", "--json", "/proc/no/such/dir/x.json"], "cannot write --json"),
        (["tune", "--from", "/no/such/result.json"], "no such file"),
    ],
)
def test_bad_input_gives_one_clear_line_and_exit_2(args: list[str], message: str) -> None:
    result = stave(*args, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("stave: error:") and message in lines[0]
    assert "Traceback" not in result.stderr


def test_tune_rejects_files_that_are_not_ladder_results(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema": "stave.bench/1", "code": ')
    other = tmp_path / "other.json"
    other.write_text('{"schema": "stave.doctor/1"}')
    for path, message in ((broken, "not JSON"), (other, "not a stave.bench/1 result")):
        result = stave("tune", "--from", str(path))
        assert result.returncode == 2 and message in result.stderr


def test_bench_data_hands_over_to_the_data_benchmark() -> None:
    result = stave("bench", "data", "--help")
    assert result.returncode == 0
    assert "--images" in result.stdout
