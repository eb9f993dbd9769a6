"""The --verify section in the doctor's JSON (schema), terminal (golden) and HTML reports.

Regenerate the golden file after an intended change (then read the diff):

    STAVE_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/report/test_report_verify.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from report_factory import make_result
from rich.console import Console

from stave.doctor.verification import Verification, VerifiedFinding
from stave.report.doctor_json import doctor_json, validate_doctor_json
from stave.report.html_doctor import doctor_html
from stave.report.terminal import render_doctor
from stave.report.verify_view import verify_renderable

GOLDEN = Path(__file__).resolve().parent / "golden" / "verify_section.txt"
UPDATE = os.environ.get("STAVE_UPDATE_GOLDEN") == "1"


def _verification() -> Verification:
    return Verification(
        findings=[
            VerifiedFinding("DATA_CPU_BOUND", 1, "The step waits for data", 1.8, "kept",
                            fixes="num_workers(num_workers=2) + persistent_workers", ratios=[1.52, 1.61, 1.70],
                            baseline_values=[0.2, 0.2, 0.2], fixed_values=[0.13, 0.124, 0.118],
                            loss={"max_dev": 0.001, "tolerance": 0.01, "input_dev": 0.0, "steps": 4, "passed": True,
                                  "text": "loss within 0.10%"}),
            VerifiedFinding("THREAD_OVERSUBSCRIPTION", 2, "16 threads on 2 cores", 1.3, "reverted",
                            fixes="threads(threads=2)",
                            reason="loss check failed: loss off by 4.00% > 1.0% at step 3"),
            VerifiedFinding("OPTIMIZER_UNFUSED", 3, "AdamW per tensor", 1.1, "crashed",
                            fixes="optimizer_impl(impl=fused)",
                            reason="the script failed with the fix: RuntimeError: fused needs CUDA"),
            VerifiedFinding("MEMORY_GROWTH", 4, "RSS grows", 1.0, "not_verifiable",
                            reason="not verifiable without code change"),
        ],
        pairs=3, steps_per_run=30, warmup_steps=5)


def _text(renderable: object) -> str:
    console = Console(record=True, width=100, color_system=None, file=open(os.devnull, "w"))
    console.print(renderable)
    console.file.close()
    return console.export_text()


def test_json_carries_the_section_and_validates() -> None:
    result = make_result(ranks=1)
    assert "verify" not in doctor_json(result)  # absent without --verify: the reports are unchanged
    result.verification = _verification()
    report = doctor_json(result)
    validate_doctor_json(report)
    kept = report["verify"]["findings"][0]
    assert kept["measured_speedup"] == pytest.approx(1.61) and kept["interval"] == [1.52, 1.70]
    assert [f["status"] for f in report["verify"]["findings"]] == ["kept", "reverted", "crashed", "not_verifiable"]


def test_terminal_section_golden() -> None:
    text = _text(verify_renderable(_verification().to_dict()))
    if UPDATE:
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
    assert "measured 1.61x [1.52–1.70], 3 pairs" in text and "not verifiable without code change" in text


def test_full_reports_show_the_section() -> None:
    result = make_result(ranks=1)
    result.verification = _verification()
    console = Console(record=True, width=100, color_system=None, file=open(os.devnull, "w"))
    render_doctor(result, console)
    console.file.close()
    assert "Verification (--verify)" in console.export_text()
    html = doctor_html(result)
    assert 'id="verify"' in html and "1.61x [1.52–1.70]" in html and "reverted" in html
