"""The doctor's terminal report: golden output of a fixed synthetic run, and robustness.

Regenerate the golden files after an intended change of the report (then read the diff):

    STAVE_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/report/test_report_terminal.py
"""

from __future__ import annotations

import dataclasses
import os
import types
from pathlib import Path

from rich.console import Console

from stave.doctor.result import DoctorResult
from stave.report import trace_section_lookup
from stave.report.doctor_json import doctor_json, validate_doctor_json
from stave.report.terminal import render_doctor

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("STAVE_UPDATE_GOLDEN") == "1"


def render(result: DoctorResult, width: int = 100) -> str:
    console = Console(record=True, width=width, color_system=None, file=open(os.devnull, "w"))
    render_doctor(result, console)
    text = console.export_text()
    console.file.close()
    # Trailing spaces are padding of rich's fixed-width lines, not content.
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    expected = path.read_text(encoding="utf-8")
    assert text == expected, f"terminal report differs from {path}; see the module docstring to regenerate"


def test_two_rank_report_matches_golden(result: DoctorResult) -> None:
    check_golden("doctor_two_ranks.txt", render(result))


def test_empty_run_matches_golden(empty_result: DoctorResult) -> None:
    check_golden("doctor_empty.txt", render(empty_result))


def test_report_has_every_section_and_the_numbers(result: DoctorResult) -> None:
    text = render(result)
    for title in ("stave doctor", "Step time", "Utilization", "Data pipeline", "Top lines", "Ranks (2)",
                  "Findings (3)", "Notes"):
        assert title in text
    assert "median 227 ms" in text  # the synthetic steps' median
    assert "pressure, memory (PSI some)" in text
    psi_row = next(line for line in text.splitlines() if line.startswith("pressure, memory"))
    assert psi_row.split()[-3:] == ["n/a", "n/a", "n/a"]  # absent, not 0
    assert "GPU utilization" not in text  # a CPU run has no GPU rows
    first, second = text.index("DATA_CPU_BOUND"), text.index("STEP_OUTLIERS")
    assert first < second
    assert "transforms.Resize(64, antialias=True)" in text


def test_gpu_rows_appear_on_a_cuda_run(single_result: DoctorResult) -> None:
    single_result.record.config.device_type = "cuda"
    single_result.record.config.device_name = "NVIDIA H100 80GB HBM3"
    text = render(single_result)
    assert "cuda · NVIDIA H100 80GB HBM3" in text
    gpu_row = next(line for line in text.splitlines() if line.startswith("GPU utilization"))
    assert gpu_row.split()[-3:] == ["n/a", "n/a", "n/a"]  # NVML absent: shown as absent


def test_markup_in_user_strings_is_printed_literally(single_result: DoctorResult) -> None:
    record = single_result.record
    record.run.script = "/data/[bold]x[/]/train[0].py"
    record.run.args = ["--tag", "[/red]"]
    bad = dataclasses.replace(single_result.findings[0], title="[link=x]click[/link]",
                              evidence={"path": "[/]"})
    single_result.findings[0] = bad
    text = render(single_result)
    assert "/data/[bold]x[/]/train[0].py" in text
    assert "[link=x]click[/link]" in text
    assert "Path  [/]" in text


def test_narrow_terminal_does_not_crash(result: DoctorResult) -> None:
    text = render(result, width=60)
    assert "DATA_CPU_BOUND" in text


def test_trace_section_uses_the_trace_renderer(single_result: DoctorResult, monkeypatch) -> None:
    single_result.trace = {"kernels": 3}

    def render_terminal(trace, console) -> None:
        console.print(f"TRACE SECTION {trace['kernels']} kernels")

    # A trace section that renders only to the terminal: the JSON leaves the trace out and says so.
    monkeypatch.setattr(trace_section_lookup, "_trace_module", lambda: types.SimpleNamespace(render_terminal=render_terminal))
    text = render(single_result)
    assert "Profiler trace" in text
    assert "TRACE SECTION 3 kernels" in text
    assert "no report section for it is installed" in text


def test_a_trace_without_renderer_is_noted_not_guessed(single_result: DoctorResult, monkeypatch) -> None:
    single_result.trace = {"kernels": 3}
    monkeypatch.setattr(trace_section_lookup, "TRACE_SECTION_MODULE", "stave.report.no_such_module")
    text = render(single_result)
    assert "Profiler trace" not in text
    assert "no report section for it is installed" in text


def test_a_loop_without_dataloader_has_no_sample_rate(single_result: DoctorResult) -> None:
    # nanoGPT-style loops slice their own tensors: no batch was counted, so no rate is claimed.
    for step in single_result.record.steps:
        step.samples = 0
    single_result.summary.samples_per_step = single_result.summary.samples_per_s = 0.0
    text = render(single_result)
    assert "samples/s not known (no DataLoader batch seen)" in text
    assert "0 samples/s" not in text
    summary = doctor_json(single_result)["summary"]
    assert summary["samples_per_s"] is None and summary["samples_per_step"] is None
    assert summary["step_time_s"]["median"] > 0
    validate_doctor_json(doctor_json(single_result))


def test_the_verdict_is_one_line_before_the_details(result: DoctorResult) -> None:
    lines = render(result).splitlines()
    verdict = [i for i, line in enumerate(lines) if line.startswith("Verdict: ")]
    assert len(verdict) == 1 and verdict[0] == 1  # right under the title rule
    assert lines[1] == "Verdict: DATA_CPU_BOUND est. 1.74x · 2 more findings · step 227 ms (median)"
    assert verdict[0] < next(i for i, line in enumerate(lines) if line.startswith("script"))


def test_host_to_device_phase_shows_only_when_the_run_copied() -> None:
    from stave.measure.steps import PHASES
    from stave.report.doctor_wording import shown_phases

    none = {"phase_s": {"h2d": {"mean": 0.0, "median": 0.0}}, "h2d_bytes_per_step": 0}
    some = {"phase_s": {"h2d": {"mean": 0.004, "median": 0.004}}, "h2d_bytes_per_step": 3 << 20}
    assert "h2d" not in shown_phases(none) and len(shown_phases(none)) == len(PHASES) - 1
    assert shown_phases(some) == PHASES
    # Copies counted but too short to time still count as copies.
    assert "h2d" in shown_phases({"phase_s": {"h2d": {"mean": 0.0}}, "h2d_bytes_per_step": 1024})
