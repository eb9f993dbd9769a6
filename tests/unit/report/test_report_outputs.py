"""Writing the report files: all four, atomically, and a clear error for an unwritable path."""

from __future__ import annotations

import json
import os

import pytest

from stave.errors import OutputError
from stave.report.doctor_json import validate_doctor_json
from stave.report.outputs import write_doctor_outputs


def test_writes_each_requested_file(result, tmp_path) -> None:
    paths = {k: tmp_path / "out" / f"report.{k}" for k in ("json", "timeline.json", "folded")}
    written = write_doctor_outputs(result, json_path=paths["json"], timeline_path=paths["timeline.json"],
                                   flamegraph_path=paths["folded"])
    assert written == [paths["json"], paths["timeline.json"], paths["folded"]]
    report = json.loads(paths["json"].read_text())
    validate_doctor_json(report)
    timeline = json.loads(paths["timeline.json"].read_text())
    assert {e["pid"] for e in timeline["traceEvents"]} == {0, 1}  # both ranks
    assert paths["folded"].read_text().count("\n") == len(result.record.stacks.collapsed())
    leftovers = [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]
    assert leftovers == []  # no temporary files left behind


def test_nothing_requested_writes_nothing(result, tmp_path) -> None:
    assert write_doctor_outputs(result) == []


def test_unwritable_path_is_one_clear_error(result, tmp_path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    # A path under a regular file cannot be created, whoever runs the test (root included).
    with pytest.raises(OutputError, match="cannot write .*report.json"):
        write_doctor_outputs(result, json_path=blocker / "report.json")


def test_path_that_is_a_directory_is_one_clear_error(result, tmp_path) -> None:
    with pytest.raises(OutputError, match="cannot write"):
        write_doctor_outputs(result, json_path=tmp_path)


def test_html_is_written(empty_result, tmp_path) -> None:
    path = tmp_path / "r.html"
    write_doctor_outputs(empty_result, html_path=path)
    assert path.read_text().startswith("<!DOCTYPE html>")


def test_show_and_write_prints_and_writes_the_same_numbers(single_result, tmp_path) -> None:
    from rich.console import Console

    from stave.report.show import show_and_write

    console = Console(record=True, width=100, color_system=None, file=open(os.devnull, "w"))
    path = tmp_path / "r.json"
    show_and_write(single_result, json_path=str(path), console=console)
    console.file.close()
    median_ms = json.loads(path.read_text())["summary"]["step_time_s"]["median"] * 1e3
    assert f"median {median_ms:.0f} ms" in console.export_text()
