"""The doctor's HTML report: one self-contained page with the tables of the terminal report, the
step-time breakdown over steps and the utilization over time as inline SVG, and the findings.

The numbers come from the same ``stave.doctor/1`` dict the JSON report writes; every string from
the user's job is escaped (a script called ``<script>.py`` shows as text).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from stave.doctor.result import DoctorResult
from stave.diagnose.finding import rank_findings
from stave.measure.steps import PHASES
from stave.report import charts
from stave.report import doctor_wording as dt
from stave.report import html_page as hp
from stave.report.doctor_json import doctor_json
from stave.report.findings_view import checkout_docs_href, findings_html
from stave.report.trace_section_lookup import missing_trace_note, trace_renderer
from stave.report.palette import PHASE_COLORS, PHASE_LABELS
from stave.report.units import (
    NA,
    fmt_bytes,
    fmt_count,
    fmt_ms,
    fmt_rate,
    fmt_seconds,
    fmt_share,
    fmt_throughput,
    fmt_us,
    sig,
)
from stave.report.verdict import verdict_html
from stave.report.verify_view import verify_html

# A bar per step stays readable up to a few hundred steps; beyond that consecutive steps are
# averaged in equal groups (the caption says so) so the SVG stays small and the bars visible.
MAX_STEP_BARS = 300

# Utilization series to plot, by chart: (series label, counter, scale to the chart's unit). One unit
# per chart: the job's processes in % of one core (up to 100 x cores), the machine in % of all cores.
_CPU_JOB_SERIES = (("main process", "cpu_main_pct", 1.0), ("loader workers", "cpu_workers_pct", 1.0))
_CPU_MACHINE_SERIES = (("whole machine", "cpu_system_pct", 1.0), ("steal", "cpu_steal_pct", 1.0),
                       ("iowait", "iowait_pct", 1.0))
_MEMORY_SERIES = (("RSS, process tree", "rss_bytes", 2.0**-30), ("available", "mem_available_bytes", 2.0**-30))
_GPU_SERIES = (("GPU utilization %", "gpu_util_pct", 1.0),)
_GPU_MEMORY_SERIES = (("GPU memory used", "gpu_mem_used_bytes", 2.0**-30),
                      ("CUDA allocated", "cuda_allocated_bytes", 2.0**-30))


def doctor_html(result: DoctorResult, report: dict[str, Any] | None = None,
                html_dir: str | None = None) -> str:
    """The complete HTML report of ``result`` (``report``: its ``doctor_json``, if already built).

    The first screen is the verdict (top findings, their fixes, the step time); the run's details,
    the breakdown and the plots follow. ``html_dir``: where the page will be written, so its docs
    links are relative to it (None: docs pages are named, not linked).
    """
    report = doctor_json(result) if report is None else report
    run = report["run"]
    name = (run.get("script") or "script").rsplit("/", 1)[-1]
    findings = rank_findings(list(result.findings))
    docs_href = checkout_docs_href(html_dir)
    body = [
        f"<h1>stave doctor: {hp.esc(name)}</h1>",
        f'<p class="sub">{hp.esc(run.get("started_at") or "")} · {hp.esc(run.get("hostname") or "")}</p>',
        verdict_html(report, findings, docs_href),
        hp.key_values(dt.header_rows(report)),
        step_time_html(report),
        utilization_html(report),
        pipeline_html(report),
        device_html(report),
        hot_lines_html(report),
        ranks_html(report),
        hp.section(f"Findings ({len(findings)})", findings_html(findings, docs_href=docs_href), section_id="findings"),
        verify_html(report["verify"]) if "verify" in report else "",
        trace_section_html(result),
        notes_html(report["notes"], missing_trace_note(result.trace, "render_html")),
    ]
    return hp.render_page(f"stave doctor: {name}", "\n".join(b for b in body if b))


def step_time_html(report: dict[str, Any]) -> str:
    """Step-time statistics, the breakdown bar and table, and the breakdown over steps."""
    summary = report["summary"]
    if not summary["steps"]:
        return hp.section("Step time", "<p>No step was counted: there is no step time to break down.</p>")
    st = summary["step_time_s"]
    stats = (f"<p>median {hp.esc(fmt_seconds(st['median']))} · p90 {hp.esc(fmt_seconds(st['p90']))} · "
             f"mean {hp.esc(fmt_seconds(st['mean']))} · "
             f"{hp.esc(fmt_throughput(summary['samples_per_s'], summary['samples_per_step']))}</p>")
    phases = dt.shown_phases(summary)
    parts = [(f"{PHASE_LABELS[p]} {fmt_share(summary['breakdown'][p])}", summary["breakdown"][p] or 0.0,
              PHASE_COLORS[p]) for p in phases]
    rows = [(PHASE_LABELS[p], fmt_share(summary["breakdown"][p]), fmt_ms(summary["phase_s"][p]["mean"]),
             fmt_ms(summary["phase_s"][p]["median"])) for p in phases]
    table = hp.table(("phase", "share", "mean per step", "median per step"), rows, numeric=(1, 2, 3))
    note = "" if "h2d" in phases else '<p class="muted">no host→device copies in this run</p>'
    return hp.section("Step time", stats, workload_html(report), hp.stacked_bar(parts), table, note,
                      breakdown_chart(report["steps"], phases))


def workload_html(report: dict[str, Any]) -> str:
    """Tokens/s, evaluation's share, MFU, framework and attention: one paragraph per line shown."""
    return "".join(f"<p>{hp.esc(line)}</p>" for line in dt.workload_lines(report["summary"], report["config"]))


def breakdown_chart(steps: Sequence[dict[str, Any]], phases: Sequence[str] = PHASES) -> str:
    """Stacked bars of the ``phases`` (ms) of each counted step, as an inline SVG figure."""
    counted = [s for s in steps if s["counted"]]
    if not counted:
        return ""
    groups = group_evenly(counted, MAX_STEP_BARS)
    x = [sum(s["index"] for s in g) / len(g) for g in groups]
    series = {p: [sum(s["phase_s"][p] for s in g) / len(g) * 1e3 for g in groups] for p in phases}
    caption = "counted steps (warm-up and profiled steps left out)"
    if len(groups) < len(counted):
        caption += f"; each bar is the mean of {math.ceil(len(counted) / len(groups))} consecutive steps"
    chart = charts.StackedBars(x=x, series=series, title="Step time by phase", xlabel="step", ylabel="ms",
                               colors=PHASE_COLORS, labels=PHASE_LABELS)
    return hp.figure(charts.to_svg(chart), caption)


def group_evenly(items: Sequence[Any], max_groups: int) -> list[Sequence[Any]]:
    """Consecutive items in at most ``max_groups`` groups of equal size (the last may be shorter)."""
    size = max(1, math.ceil(len(items) / max(1, max_groups)))
    return [items[i:i + size] for i in range(0, len(items), size)]


def utilization_html(report: dict[str, Any]) -> str:
    """The utilization table and the counters over time."""
    util = report["summary"].get("utilization")
    if not util or not util.get("samples"):
        return hp.section("Utilization", "<p>No machine samples were taken.</p>")
    table = hp.table(("", "mean", "min", "max"), dt.utilization_rows(report), numeric=(1, 2, 3))
    points = report["utilization"]
    reasons = {"loader workers": f"no loader workers: {why}"} if (why := dt.no_workers_reason(report)) else {}
    figures = [
        _lines(points, _CPU_JOB_SERIES, "CPU of this job (% of one core)", "% of one core", reasons),
        # Steal is drawn where the machine reports it (Linux's /proc/stat, psutil), not noted as missing.
        _lines(points, tuple(sr for sr in _CPU_MACHINE_SERIES
                             if sr[1] != "cpu_steal_pct" or any(p.get("cpu_steal_pct") is not None for p in points)),
               "CPU of the whole machine (% of all cores)", "% of all cores"),
        _lines(points, _MEMORY_SERIES, "Host memory", "GiB"),
    ]
    if report["config"].get("device_type") == "cuda":
        figures += [_lines(points, _GPU_SERIES, "GPU utilization", "%"),
                    _lines(points, _GPU_MEMORY_SERIES, "GPU memory", "GiB")]
    return hp.section("Utilization", f'<p class="muted">{hp.esc(dt.utilization_window(report))}</p>', table,
                      *figures)


def _lines(points: Sequence[dict[str, Any]], spec: Sequence[tuple[str, str, float]], title: str, unit: str,
           reasons: dict[str, str] | None = None) -> str:
    """A line chart of the series with readings; a series without any is left out of the chart and its
    legend, and the caption says why (``reasons`` by label, else: the machine did not provide it)."""
    series = {label: [None if p.get(key) is None else p[key] * scale for p in points] for label, key, scale in spec}
    absent = [label for label, values in series.items() if all(v is None for v in values)]
    why = [(reasons or {}).get(label, f"{label}: not provided by this machine") for label in absent]
    if len(absent) == len(series):
        return f'<p class="muted">{hp.esc(title)}: {NA} ({hp.esc("; ".join(why))})</p>'
    shown = {label: values for label, values in series.items() if label not in absent}
    chart = charts.Lines(x=[p["t_s"] for p in points], series=shown, title=title, xlabel="time (s)", ylabel=unit)
    return hp.figure(charts.to_svg(chart), "; ".join(why))


def pipeline_html(report: dict[str, Any]) -> str:
    """Loader settings, stage times per sample, and the workers' accounts and I/O."""
    pipe = report["data_pipeline"]
    loaders = "".join(f"<p>{hp.esc(dt.loader_text(ld))}</p>" for ld in report["config"].get("loaders", []))
    stages = ""
    if pipe["stages"]:
        several = len({s["loader_id"] for s in pipe["stages"]}) > 1
        rows = [(s["name"], f"{s['where']}, loader {s['loader_id']}" if several else s["where"],
                 fmt_us(s["wall_per_sample_s"]), fmt_us(s["cpu_per_sample_s"]), fmt_share(s["off_cpu_frac"]),
                 fmt_share(s["share"])) for s in pipe["stages"]]
        stages = hp.table(("stage", "where", "per sample", "CPU", "off-CPU", "share"), rows, numeric=(2, 3, 4, 5))
    workers = ""
    if pipe["workers"]:
        rows = [("main" if w["worker_id"] < 0 else f"{w['loader_id']}/{w['worker_id']}", w["pid"],
                 fmt_count(w["samples"]), fmt_us(w["getitem_per_sample_s"]), fmt_share(w["getitem_cpu_frac"]),
                 _num(w["opens_per_sample"]), _num(w["reads_per_sample"]), fmt_bytes(w["bytes_per_read"]))
                for w in pipe["workers"]]
        io = dt.io_text(pipe["io"]) if pipe["io"] is not None else "worker I/O: no worker reported its counters"
        workers = f"<p>{hp.esc(io)}</p>" + hp.table(
            ("worker", "pid", "samples", "per sample", "on CPU", "opens/sample", "reads/sample", "bytes/read"),
            rows, numeric=(1, 2, 3, 4, 5, 6, 7))
    if not (loaders or stages or workers):
        return hp.section("Data pipeline", "<p>No DataLoader was iterated.</p>")
    return hp.section("Data pipeline", loaders, stages, workers)


def _num(value: float | None) -> str:
    return NA if value is None else sig(value)


def device_html(report: dict[str, Any]) -> str:
    """Host-device copies and syncing call sites (empty when the run made none)."""
    device, steps = report["device"], report["summary"]["steps"]
    copies = [c for c in device["copies"] if c["count"]]
    parts = []
    if copies:
        rows = [(c["direction"], c["dtype"], "pinned" if c["pinned"] else "pageable",
                 "non_blocking" if c["non_blocking"] else "blocking",
                 sig(c["count"] / steps) if steps else NA, fmt_bytes(c["bytes"] / steps) if steps else NA)
                for c in copies]
        parts.append(hp.table(("direction", "dtype", "memory", "mode", "per step", "bytes/step"), rows,
                              numeric=(4, 5)))
    if device["syncs"]:
        rows = [(s["kind"], dt.line_location(s), fmt_count(s["calls"]), fmt_count(s["steps_with_call"]))
                for s in device["syncs"]]
        parts.append(hp.table(("sync", "line", "calls", "steps with one"), rows, numeric=(2, 3)))
    return hp.section("Host ↔ device", *parts) if parts else ""


def hot_lines_html(report: dict[str, Any]) -> str:
    """The user's lines the main thread was found on most."""
    title = f"Top lines ({dt.stack_text(report['summary'])})"
    if not report["summary"]["stack_samples"]:
        return hp.section(title, "<p>No stack samples were taken.</p>")
    if not report["hot_lines"]:
        return hp.section(title, "<p>No stack sample fell in the user's code.</p>")
    rows = [(fmt_share(h["share"]), PHASE_LABELS.get(h["phase"] or "", h["phase"] or ""), dt.line_location(h),
             h["code"] or "") for h in report["hot_lines"]]
    return hp.section(title, hp.table(("share", "phase", "line", "code"), rows, numeric=(0,)))


def ranks_html(report: dict[str, Any]) -> str:
    """Every rank side by side (only for multi-process runs)."""
    ranks = report["ranks"]
    if len(ranks) < 2:
        return ""
    phases = dt.shown_phases(report["summary"])
    rows = [(r["rank"], dt.rank_host(r), r["status"], fmt_seconds(r["step_time_s"]["median"]),
             fmt_seconds(r["step_time_s"]["p90"]), fmt_rate(r["samples_per_s"], ""),
             *(fmt_share(r["breakdown"][p]) for p in phases), fmt_seconds(r.get("comm_wait_s")),
             fmt_bytes(r.get("peak_rss_bytes")), fmt_bytes(r.get("peak_cuda_bytes"))) for r in ranks]
    headers = ("rank", "host:pid", "status", "median", "p90", "samples/s", *(PHASE_LABELS[p] for p in phases),
               "comm wait", "peak RSS", "peak GPU mem")
    return hp.section(f"Ranks ({len(ranks)})", hp.table(headers, rows, numeric=tuple(range(3, len(headers)))))


def trace_section_html(result: DoctorResult) -> str:
    """The profiler-trace section, when the trace report provides an HTML renderer."""
    render = trace_renderer("render_html") if result.trace is not None else None
    return hp.section("Profiler trace", render(result.trace)) if render is not None else ""


def notes_html(notes: Sequence[str], extra: str | None) -> str:
    """The notes, escaped, as a list."""
    items = [*notes, *([extra] if extra and extra not in notes else [])]
    if not items:
        return ""
    return hp.section("Notes", '<ul class="notes">' + "".join(f"<li>{hp.esc(n)}</li>" for n in items) + "</ul>")
