"""`python -m benchmarks.run_all`: runs what exists, names what is missing, says where numbers went."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import run_all


def test_list_names_every_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_all.main(["--list"]) == 0
    text = capsys.readouterr().out
    for name in (
        "ladder:seed-resnet18",
        "ladder:gpt-char",
        "ladder:jpeg-resnet",
        "data",
        "trace",
        "doctor_overhead",
        "doctor_estimates",
        "ladder_oracle",
    ):
        assert f"{name}:" in text


def test_missing_module_is_reported_not_run_and_failures_set_the_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ok = run_all.Benchmark(
        "ok",
        "json",
        lambda out, quick: ["-c", f"open(r'{out / 'ok.json'}', 'w').write('{{}}')"],
        lambda out: [out / "ok.json"],
    )
    missing = run_all.Benchmark("ghost", "stave.no_such_benchmark", lambda out, quick: [], lambda out: [])
    failing = run_all.Benchmark("bad", "json", lambda out, quick: ["-c", "raise SystemExit(3)"], lambda out: [])
    monkeypatch.setattr(run_all, "BENCHMARKS", (ok, missing, failing))
    assert run_all.main(["--out", str(tmp_path)]) == 1
    text = capsys.readouterr().out
    assert "ok: ok in" in text and str(tmp_path / "ok.json") in text
    assert "ghost: missing (module stave.no_such_benchmark is not in this checkout); not run" in text
    assert "bad: FAILED (exit 3)" in text
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [e["status"] for e in summary["benchmarks"]] == ["ok", "missing", "failed"]


def test_only_rejects_unknown_names() -> None:
    with pytest.raises(SystemExit):
        run_all.main(["--only", "nope"])


def test_ladder_commands_write_json_html_and_png(tmp_path: Path) -> None:
    bench = next(b for b in run_all.BENCHMARKS if b.name == "ladder:gpt-char")
    argv = bench.argv(tmp_path, True)
    assert argv[:4] == ["-m", "stave", "bench", "ladder"] and "--quick" in argv
    assert {p.suffix for p in bench.outputs(tmp_path)} == {".json", ".html", ".png"}
