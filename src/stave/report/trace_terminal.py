"""The terminal report of ``stave trace`` (rich): traces, step breakdown, GPU, ranks, findings.

:func:`render_trace` prints into the console it is given (stdout in the CLI, a recording console
of fixed width in tests). Absent values print as "n/a", never as 0.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from stave.report.findings_view import findings_renderable
from stave.report.units import fmt_bar, fmt_byte_rate, fmt_bytes, fmt_ms, fmt_seconds, fmt_share
from stave.trace.analysis import TraceAnalysis
from stave.diagnose.trace_report import TraceReport

# Width of the breakdown bars: a 100% part fills this many cells, leaving room for name, share
# and time on an 80-column terminal.
BAR_WIDTH = 30
# Part colours: GPU work cool, host work warm, other grey (the same in the HTML report).
PART_COLORS: dict[str, str] = {
    "kernel": "#0072B2",
    "memcpy": "#56B4E9",
    "memset": "#88CCEE",
    "communication": "#CC79A7",
    "runtime": "#E69F00",
    "dataloader": "#D55E00",
    "cpu_exec": "#F0E442",
    "forward": "#0072B2",
    "backward": "#56B4E9",
    "optimizer": "#009E73",
    "other": "#999999",
}
TOP_ROWS = 10
_GROUP_LABELS = {"communication": "comm"}


def render_trace(report: TraceReport, console: Console) -> None:
    """Print the whole report."""
    console.print(trace_renderable(report))


def trace_renderable(report: TraceReport) -> RenderableType:
    """The report as one rich renderable."""
    parts: list[RenderableType] = [Rule("stave trace", style="bold")]
    for t in report.traces:
        parts.append(_header(t))
    if report.multi_rank and report.rank_timings:
        parts.append(_ranks_table(report))
    for t in report.traces if len(report.traces) <= 2 else report.traces[:1]:
        if len(report.traces) > 1:
            parts.append(Rule(f"rank {t.rank}", style="dim"))
        parts.append(_breakdown(t))
        if t.gpu is not None:
            parts.append(_gpu(t))
        elif t.top_ops:
            parts.append(_top_ops(t))
    if len(report.traces) > 2:
        parts.append(Text(f"(details shown for rank {report.traces[0].rank}; all ranks are in --json/--html)",
                          style="dim"))
    parts.append(Rule("findings", style="bold"))
    parts.append(findings_renderable(report.findings))
    notes = list(report.notes) + [f"skipped {s.path}: {s.reason}" for s in report.skipped]
    for t in report.traces:
        notes.extend(f"{Path(t.path).name}: {n}" for n in t.notes)
    if notes:
        parts.append(Rule("notes", style="dim"))
        parts.extend(Text(f"- {n}", style="dim") for n in notes)
    return Group(*parts)


def _header(t: TraceAnalysis) -> Text:
    steps = (f"{t.step_count} step{'s' if t.step_count != 1 else ''}" if t.steps_marked
             else "no step markers (whole trace = 1 step)")
    device = t.device_name or ("CPU only" if t.kind == "cpu" else "GPU")
    return Text.assemble(
        (f"{t.path}", "bold"),
        f"\n  rank {t.rank} ({t.rank_source}) · {device} · {t.events:,} events · "
        f"{fmt_bytes(t.uncompressed_bytes)} JSON · {steps} · step {fmt_ms(t.step_time_median_s)} median",
    )


def _breakdown(t: TraceAnalysis) -> RenderableType:
    table = Table(box=None, pad_edge=False)
    table.add_column("part")
    table.add_column("", no_wrap=True)
    table.add_column("share", justify="right")
    table.add_column("per step", justify="right")
    for part in t.parts:
        share = t.breakdown_share.get(part, 0.0)
        color = PART_COLORS.get(part, "white")
        table.add_row(part, Text(fmt_bar(share, BAR_WIDTH), style=color), fmt_share(share),
                      fmt_ms(t.part_mean_s(part)))
    return Group(Text("Step time, additive breakdown (mean per step)", style="italic"), table)


def _gpu(t: TraceAnalysis) -> RenderableType:
    g = t.gpu
    assert g is not None
    overlap = fmt_share(g.communication_overlap) if g.communication_overlap is not None else "n/a"
    lines = Text.assemble(
        ("GPU", "bold"),
        f"  utilization {fmt_share(g.utilization)} (kernels)"
        f" · memcpy {fmt_seconds(g.memcpy_busy_s)} · memset {fmt_seconds(g.memset_busy_s)}"
        f"\n  idle: host wait {fmt_seconds(g.idle_host_wait_s)} · short gaps {fmt_seconds(g.idle_short_gap_s)}"
        f" · other {fmt_seconds(g.idle_other_s)} (summed over {len(g.streams)} streams)"
        f"\n  kernel time: compute {fmt_seconds(g.time_by_group_s.get('compute'))}"
        f" · communication {fmt_seconds(g.time_by_group_s.get('communication'))}"
        f" (overlapped by compute {overlap}) · memory {fmt_seconds(g.time_by_group_s.get('memory'))}"
        f"\n  matmuls: tensor cores fp16/bf16 {fmt_seconds(g.matmul_s.get('tensor_core_low'))}"
        f" · TF32 {fmt_seconds(g.matmul_s.get('tensor_core_tf32'))}"
        f" · fp32 CUDA cores {fmt_seconds(g.matmul_s.get('fp32_no_tc'))}"
        f" · fp16/bf16 without tensor cores {fmt_seconds(g.matmul_s.get('low_no_tc'))}",
    )
    parts: list[RenderableType] = [lines]
    kernels = Table(title="Top kernels", title_justify="left", box=None, pad_edge=False)
    for col, just in (("kernel", "left"), ("group", "left"), ("TC", "left"), ("calls", "right"),
                      ("total", "right"), ("share", "right")):
        kernels.add_column(col, justify=just, overflow="ellipsis", no_wrap=True,
                           max_width=40 if col == "kernel" else None)
    for k in g.top_kernels[:TOP_ROWS]:
        kernels.add_row(k.short_name, _GROUP_LABELS.get(k.group, k.group), "yes" if k.tensor_core else "", f"{k.count:,}",
                        fmt_seconds(k.total_s), fmt_share(k.share))
    parts.append(kernels)
    if g.memcpy:
        copies = Table(title="Memory copies", title_justify="left", box=None, pad_edge=False)
        for col in ("direction", "host memory", "count", "bytes", "time", "bandwidth"):
            copies.add_column(col, justify="left" if col in ("direction", "host memory") else "right")
        for m in g.memcpy:
            copies.add_row(m.direction, m.host_memory, f"{m.count:,}", fmt_bytes(m.bytes),
                           fmt_seconds(m.busy_s), fmt_byte_rate(m.bandwidth_bytes_per_s))
        parts.append(copies)
    if t.launch is not None and t.launch.launch_bound_kernels:
        lb = t.launch
        parts.append(Text(
            f"Launch-bound: {lb.launch_bound_kernels:,} of {lb.kernels_with_launch:,} kernels ran shorter than "
            f"their launch; {lb.stretches} stretches of ≥16 ({lb.stretch_kernels:,} kernels), "
            f"GPU idle inside them {fmt_seconds(lb.stretch_idle_ns / 1e9)}"
        ))
    if t.syncs is not None and t.syncs.calls:
        s = t.syncs
        sync = Table(title=f"Synchronizing calls: {s.calls} ({s.calls_per_step:.1f} per step), "
                           f"host blocked {fmt_seconds(s.blocked_s)}", title_justify="left", box=None, pad_edge=False)
        for col in ("call", "op", "source line", "count", "blocked", "GPU idle after"):
            sync.add_column(col, justify="right" if col in ("count", "blocked", "GPU idle after") else "left")
        for x in s.sites[:TOP_ROWS]:
            where = f"{x.file}:{x.line} ({x.function})" if x.file else "n/a"
            sync.add_row(x.call, x.op or "n/a", where, str(x.count), fmt_seconds(x.blocked_s),
                         fmt_seconds(x.gpu_idle_after_s))
        parts.append(sync)
    return Group(*parts)


def _top_ops(t: TraceAnalysis) -> Table:
    table = Table(title="Top ops by self time", title_justify="left", box=None, pad_edge=False)
    for col in ("op", "calls", "self", "total"):
        table.add_column(col, justify="left" if col == "op" else "right")
    for o in t.top_ops:
        table.add_row(o.name, f"{o.calls:,}", fmt_seconds(o.self_s), fmt_seconds(o.total_s))
    return table


def _ranks_table(report: TraceReport) -> Table:
    by_rank = {t.rank: t for t in report.traces}
    parts = report.traces[0].parts
    table = Table(title="Ranks side by side (mean per step)", title_justify="left", box=None, pad_edge=False)
    table.add_column("rank", justify="right")
    table.add_column("step", justify="right")
    for p in parts:
        table.add_column(p, justify="right")
    table.add_column("in collectives", justify="right")
    table.add_column("peak memory", justify="right")
    for r in report.rank_timings or []:
        t = by_rank[r.rank]
        table.add_row(str(r.rank), fmt_ms(r.step_time_s), *(fmt_ms(t.part_mean_s(p)) for p in parts),
                      fmt_ms(r.collective_wait_s), fmt_bytes(r.memory_peak_bytes))
    return table
