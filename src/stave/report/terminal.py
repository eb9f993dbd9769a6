"""The doctor's terminal report (rich): header, step-time breakdown, utilization, data pipeline,
top lines, ranks, findings with their fixes, notes.

:func:`render_doctor` prints into the console it is given; the CLI passes a stdout console, the
golden-output tests a recording console of fixed width. The numbers come from the same
``stave.doctor/1`` dict the JSON report writes.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from stave.doctor.result import DoctorResult
from stave.diagnose.finding import rank_findings
from stave.measure.steps import PHASES
from stave.report import doctor_wording as dt
from stave.report import terminal_tables as ts
from stave.report.doctor_json import doctor_json
from stave.report.findings_view import findings_renderable
from stave.report.trace_section_lookup import trace_renderer
from stave.report.palette import PHASE_COLORS, PHASE_LABELS
from stave.report.units import fmt_bar, fmt_ms, fmt_seconds, fmt_share, fmt_throughput
from stave.report.verdict import headline_text
from stave.report.verify_view import verify_renderable

# Width of the per-phase bars: a 100% phase fills this many cells, which leaves room for the
# phase name, share and time on an 80-column terminal.
BREAKDOWN_BAR_WIDTH = 36


def render_doctor(result: DoctorResult, console: Console, report: dict[str, Any] | None = None) -> None:
    """Print the doctor's report of ``result`` to ``console`` (``report``: its ``doctor_json``, if
    already built)."""
    report = doctor_json(result) if report is None else report
    console.print(doctor_renderable(report, result))
    render_trace = trace_renderer("render_terminal") if result.trace is not None else None
    if render_trace is not None:
        console.print(_section("Profiler trace"))
        render_trace(result.trace, console)


def doctor_renderable(report: dict[str, Any], result: DoctorResult) -> RenderableType:
    """Everything but the trace section, as one renderable (``report`` is ``doctor_json(result)``)."""
    summary = report["summary"]
    findings = rank_findings(list(result.findings))
    # The verdict first, in one line; the details follow.
    parts: list[RenderableType] = [_section("stave doctor", first=True),
                                   Text(headline_text(report, findings), style="bold"), header(report)]
    parts += [_section("Step time"), step_time(summary), *workload({}, report["config"])]
    parts += [_section("Utilization"), ts.utilization_table(report)]
    parts += [_section("Data pipeline"), ts.pipeline_group(report)]
    device = ts.device_tables(report["device"], summary["steps"])
    if device is not None:
        parts += [_section("Host ↔ device"), device]
    parts += [_section(f"Top lines ({dt.stack_text(summary)})"),
              ts.hot_lines_table(report["hot_lines"], summary["stack_samples"])]
    if len(report["ranks"]) > 1:
        parts += [_section(f"Ranks ({len(report['ranks'])})"),
                  ts.ranks_table(report["ranks"], dt.shown_phases(summary))]
    parts += [_section(f"Findings ({len(findings)})"), findings_renderable(findings)]
    if "verify" in report:
        parts += [_section("Verification (--verify)"), verify_renderable(report["verify"])]
    if report["notes"]:
        parts += [_section("Notes"), Group(*(Text(f"• {n}") for n in report["notes"]))]
    return Group(*parts)


def _section(title: str, first: bool = False) -> RenderableType:
    rule = Rule(Text(title, style="bold"), align="left", characters="─")
    return rule if first else Padding(rule, (1, 0, 0, 0))


def header(report: dict[str, Any]) -> RenderableType:
    """Script, machine, device, software, steps and how the run ended."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for label, value in dt.header_rows(report):
        grid.add_row(label, Text(value))
    return grid


def step_time(summary: dict[str, Any]) -> RenderableType:
    """Step-time statistics and the breakdown: each phase's share, time per step and a bar."""
    st = summary["step_time_s"]
    if not summary["steps"]:
        return Text("no step was counted: there is no step time to break down")
    head = Text(
        f"median {fmt_seconds(st['median'])} · p90 {fmt_seconds(st['p90'])} · mean {fmt_seconds(st['mean'])} · "
        f"{fmt_throughput(summary['samples_per_s'], summary['samples_per_step'])}"
    )
    table = Table.grid(padding=(0, 2))
    table.add_column(no_wrap=True)
    table.add_column(justify="right", no_wrap=True)
    table.add_column(justify="right", no_wrap=True)
    table.add_column(no_wrap=True)
    phases = dt.shown_phases(summary)
    for phase in phases:
        share = summary["breakdown"][phase]
        table.add_row(
            Text(PHASE_LABELS[phase], style=PHASE_COLORS[phase]),
            fmt_share(share),
            fmt_ms(summary["phase_s"][phase]["mean"]),
            Text(fmt_bar(share, BREAKDOWN_BAR_WIDTH), style=PHASE_COLORS[phase]),
        )
    copies = "" if "h2d" in phases else "; no host→device copies in this run"
    note = Text(f"shares of the total step time; times are means per step{copies}", style="dim")
    return Group(head, *workload(summary), Padding(table, (1, 0, 0, 2)), note)


def workload(summary: dict[str, Any], config: dict[str, Any] | None = None) -> list[RenderableType]:
    """Lines under the step time: tokens/s, evaluation's share, MFU, framework and attention."""
    return [Text(line) for line in dt.workload_lines(summary, config or {})]
