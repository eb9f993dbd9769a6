"""Trace reports: terminal golden output, JSON schema, HTML safety, the doctor's trace section.

Regenerate the golden file after an intended change of the terminal report:
``STAVE_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/trace/test_trace_reports.py``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from rich.console import Console

from stave.report import trace_section
from stave.report.schemas import schema_errors
from stave.report.trace_html import trace_html
from stave.report.trace_json import trace_json
from stave.report.trace_terminal import render_trace
from stave.diagnose.trace_report import analyze_paths

DATA = Path(__file__).resolve().parents[2] / "data" / "traces"
GOLDEN = Path(__file__).resolve().parent / "golden" / "two_steps_terminal.txt"


@pytest.fixture(scope="module")
def report():
    return analyze_paths([DATA / "two_steps.json"])


def render_text(report) -> str:
    console = Console(record=True, width=100, color_system=None, force_terminal=False)
    render_trace(report, console)
    return console.export_text().replace(str(DATA), "<DATA>")


def test_terminal_golden(report) -> None:
    text = render_text(report)
    if os.environ.get("STAVE_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_terminal_sections(report) -> None:
    text = render_text(report)
    for needle in ("Step time, additive breakdown", "Top kernels", "Memory copies", "Synchronizing calls",
                   "train.py:12 (train_step)", "H2D_PAGEABLE", "docs/findings/H2D_PAGEABLE.md"):
        assert needle in text


def test_json_matches_schema_and_analysis(report) -> None:
    j = trace_json(report)
    assert schema_errors(j, "stave.trace/1") == []
    assert j["traces"][0]["rank"] == 5 and j["traces"][0]["device_name"] == "Synthetic GPU"
    assert [s["duration_s"] for s in j["steps"]] == pytest.approx([100e-6, 100e-6])
    assert {f["id"] for f in j["findings"]} >= {"H2D_PAGEABLE", "GPU_UNDERUSED", "DATA_WAIT"}
    assert all(f["source"] == "trace" for f in j["findings"])


def test_schema_rejects_a_broken_report(report) -> None:
    j = trace_json(report)
    j["traces"][0]["kind"] = "tpu"
    del j["gpu"][0]["utilization"]
    assert len(schema_errors(j, "stave.trace/1")) >= 2


def test_html_self_contained(report) -> None:
    html = trace_html(report)
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html
    assert not re.search(r"(src|href)=[\"']?https?:", html)
    assert "train.py:12" in html


def test_doctor_trace_section(report) -> None:
    assert trace_section.to_json(report)["schema"] == "stave.trace/1"
    console = Console(record=True, width=100, color_system=None)
    trace_section.render_terminal(report, console)
    assert "additive breakdown" in console.export_text()
    assert "<section>" in trace_section.render_html(report)
