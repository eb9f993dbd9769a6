"""``stave trace`` end to end: reports, schema, exit codes, clear errors.

Two tests run the real console entry in a subprocess (one line on stderr, no traceback); the rest
call ``stave.cli.main`` in-process, which takes the same path without a new interpreter each time.
"""

from __future__ import annotations

import gzip
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO.parent / "shared" / "fixtures" / "traces"
ALEXNET = FIXTURES / "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz"
SMALL = FIXTURES / "critical_path__cuda_event_sync__event_sync_trace.json.gz"

needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason="shared fixtures not checked out beside the repo")


def stave(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stave", "trace", *args], capture_output=True, text=True,
                          env=env, timeout=240)


def stave_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from stave.cli import main

    # main() points the "stave" logger at this test's stderr; put it back for the next test.
    logger = logging.getLogger("stave")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    try:
        rc = main(["trace", *args])
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved
    out, err = capsys.readouterr()
    return rc, out, err


def cpu_trace(path: Path, name: str = '<script>alert(1)</script>') -> Path:
    events = [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
         "ts": i * 1000, "dur": 1000} for i in range(3)
    ] + [
        {"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
         "pid": 1, "tid": 1, "ts": i * 1000, "dur": 600} for i in range(3)
    ] + [{"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": i * 1000 + 650, "dur": 300}
         for i in range(3)]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


@needs_fixtures
def test_gpu_trace_reports(tmp_path: Path, stave_env: dict[str, str]) -> None:
    out_json = tmp_path / "r.json"
    out_html = tmp_path / "r.html"
    r = stave(str(ALEXNET), "--json", str(out_json), "--html", str(out_html), env=stave_env)
    assert r.returncode == 0, r.stderr
    assert "Step time, additive breakdown" in r.stdout and "Top kernels" in r.stdout
    assert "Memory copies" in r.stdout and "no step markers" in r.stdout
    report = json.loads(out_json.read_text())
    from stave.report.schemas import schema_errors

    assert schema_errors(report, "stave.trace/1") == []
    assert report["traces"][0]["rank"] == 0 and len(report["steps"]) == 1
    html = out_html.read_text()
    assert "<h3>GPU</h3>" in html and not re.search(r"(src|href)=[\"']?https?:", html)


def test_cpu_trace_html_escapes_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = cpu_trace(tmp_path / "cpu.json")
    out_html = tmp_path / "r.html"
    rc, out, err = stave_main(capsys, str(trace), "--html", str(out_html), "--fail-on", "warning")
    # 60% of each step waiting for data: DATA_WAIT, critical, so --fail-on warning exits 1.
    assert rc == 1, err
    assert "DATA_WAIT" in out and "stave doctor" in out
    html = out_html.read_text()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html


@pytest.mark.parametrize(
    "content,expect",
    [
        (b"", "empty"),
        (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2}, {"ph": "X", "na', "truncated"),
        (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2}, {"ph": @}]}', "malformed JSON"),
    ],
)
def test_bad_file_exit_2_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes,
                                  expect: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    rc, _out, err = stave_main(capsys, str(bad))
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and expect in lines[0]


def test_bad_file_in_a_real_process(tmp_path: Path, stave_env: dict[str, str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2}, {"ph": "X", "na')
    r = stave(str(bad), env=stave_env)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("stave: error: ") and str(bad) in line and "byte" in line


def test_truncated_gzip_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = cpu_trace(tmp_path / "c.json").read_bytes()
    data = gzip.compress(good)
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(data[: len(data) // 2])
    rc, _out, err = stave_main(capsys, str(bad))
    assert rc == 2 and str(bad) in err and "gzip" in err


def test_directory_with_one_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "traces"
    d.mkdir()
    cpu_trace(d / "rank0.json")
    cpu_trace(d / "rank1.json")
    (d / "rank2.json").write_text('{"traceEvents": [{"ph": "X", "ts": 1')
    (d / "notes.txt").write_text("not a trace")
    out_json = tmp_path / "r.json"
    rc, _out, err = stave_main(capsys, str(d), "--json", str(out_json))
    assert rc == 0, err
    assert "skipped" in err and "rank2.json" in err
    report = json.loads(out_json.read_text())
    assert [t["rank"] for t in report["traces"]] == [0, 1]
    assert [Path(s["path"]).name for s in report["skipped"]] == ["rank2.json"]


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _out, err = stave_main(capsys, str(tmp_path / "missing.json"))
    assert rc == 2 and "no such file" in err
    empty = tmp_path / "empty_dir"
    empty.mkdir()
    rc, _out, err = stave_main(capsys, str(empty))
    assert rc == 2 and "no trace files" in err
    trace = cpu_trace(tmp_path / "c.json")
    rc, _out, err = stave_main(capsys, str(trace), "--json", str(tmp_path))
    assert rc == 2 and "directory" in err


@needs_fixtures
def test_quiet_json_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json = tmp_path / "r.json"
    rc, out, _err = stave_main(capsys, str(SMALL), "--quiet", "--json", str(out_json))
    assert rc == 0 and out == ""
    assert json.loads(out_json.read_text())["schema"] == "stave.trace/1"
