"""`stave bench ladder` and `stave tune` from the command line: outputs, exit codes, error lines.

One real run goes through a subprocess (as a user runs it); the error cases call the CLI's
``main`` in-process, which is the same code without the interpreter start-up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from stave.report.bench_json import load_schema
from stave.cli import main

REPO = Path(__file__).resolve().parents[3]
TINY_DIR = REPO / "tests" / "unit" / "bench"


@pytest.fixture(scope="module")
def ladder_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path_factory.mktemp("ladder")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    args = [
        "bench",
        "ladder",
        "--job",
        "tiny_job:spec",
        "--quick",
        "--rungs",
        "uint8",
        "--window-s",
        "0.05",
        "--json",
        str(out / "r.json"),
        "--html",
        str(out / "r.html"),
        "--png",
        str(out / "r.png"),
    ]
    result = subprocess.run(
        [sys.executable, "-m", "stave", *args], cwd=TINY_DIR, env=env, capture_output=True, text=True, timeout=600
    )
    return result, out


@pytest.fixture
def in_tiny_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(TINY_DIR)
    monkeypatch.syspath_prepend(str(TINY_DIR))


def test_ladder_writes_json_html_png_and_prints_table_and_code(ladder_run) -> None:
    result, out = ladder_run
    assert result.returncode == 0, result.stderr
    doc = json.loads((out / "r.json").read_text())
    jsonschema.validate(doc, load_schema())
    assert [r["name"] for r in doc["rungs"]] == ["baseline", "uint8"]
    assert (out / "r.png").read_bytes().startswith(b"\x89PNG")
    assert "<svg" in (out / "r.html").read_text()
    assert "stave bench ladder: tiny" in result.stdout and "fed ratio" in result.stdout
    assert "for inputs, targets in loader:" in result.stdout  # the final configuration as code
    assert "trying" in result.stderr and "trying" not in result.stdout  # progress on stderr only


def test_tune_from_a_result_prints_only_the_code(ladder_run, capsys: pytest.CaptureFixture[str]) -> None:
    _result, out = ladder_run
    assert main(["tune", "--from", str(out / "r.json")]) == 0
    printed = capsys.readouterr().out
    assert printed == json.loads((out / "r.json").read_text())["code"]
    compile(printed, "<tune>", "exec")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bench", "ladder", "--job", "no_such_mod:spec"], "cannot import 'no_such_mod'"),
        (["bench", "ladder", "--job", "tiny_job:not_a_spec"], "must return a stave.bench.JobSpec or a dict"),
        (["bench", "ladder", "--job", "tiny_job:spec", "--rungs", "warp_drive"], "--rungs: unknown rung(s) warp_drive"),
        (["bench", "ladder", "--job", "tiny_job:spec", "--pairs", "2"], "at least 3 windows"),
        (["bench", "ladder", "--workload", "gpt-char", "--size", "0"], "--size must be a positive int"),
        (["bench", "ladder", "--json", "/proc/no/such/dir/x.json"], "cannot write --json"),
        (["tune", "--from", "/no/such/result.json"], "no such file"),
    ],
)
def test_bad_input_gives_one_clear_line_and_exit_2(
    args: list[str], message: str, in_tiny_dir: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("stave: error:") and message in lines[0], lines


def test_tune_rejects_files_that_are_not_ladder_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema": "stave.bench/1", "code": ')
    other = tmp_path / "other.json"
    other.write_text('{"schema": "stave.doctor/1"}')
    for path, message in ((broken, "not JSON"), (other, "not a stave.bench/1 result")):
        assert main(["tune", "--from", str(path)]) == 2
        assert message in capsys.readouterr().err


def test_bench_data_hands_over_to_the_data_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["bench", "data", "--help"])
    assert stop.value.code == 0
    assert "--images" in capsys.readouterr().out


def test_ctrl_c_before_the_end_still_writes_the_rungs_measured(
    in_tiny_dir: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from stave.bench import ladder as L

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    # The rungs are climbed for real; the Ctrl-C lands in the final comparison.
    monkeypatch.setattr(L, "finish", interrupted)
    out = tmp_path / "r.json"
    args = ["bench", "ladder", "--job", "tiny_job:spec", "--quick", "--rungs", "uint8", "--window-s", "0.05"]
    assert main([*args, "--json", str(out)]) == 130
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, load_schema())
    assert [r["name"] for r in doc["rungs"]] == ["baseline", "uint8"]
    assert doc["rungs"][1]["samples_per_s"] > 0 and doc["notes"] == ["incomplete: interrupted (Ctrl-C)"]
    captured = capsys.readouterr()
    assert "INCOMPLETE" in captured.out and "configuration kept so far" in captured.out
    assert "stopped early" in captured.err and captured.err.rstrip().endswith("stave: interrupted")
