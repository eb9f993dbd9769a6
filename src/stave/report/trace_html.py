"""The HTML report of ``stave trace``: one self-contained page (inline CSS and SVG, no network).

Built from the shared primitives (:mod:`stave.report.html_page`, :mod:`stave.report.charts`,
:mod:`stave.report.findings_view`); every string from the trace (paths, kernel and op names) is
escaped by them.
"""

from __future__ import annotations

from stave.report import html_page as hp
from stave.report.charts import StackedBars, to_svg
from stave.report.findings_view import findings_html
from stave.report.trace_terminal import PART_COLORS, TOP_ROWS
from stave.report.units import fmt_byte_rate, fmt_bytes, fmt_ms, fmt_seconds, fmt_share
from stave.trace.analysis import TraceAnalysis
from stave.diagnose.trace_report import TraceReport

# Steps drawn in the per-step chart; a trace of thousands of steps would make unreadable bars.
MAX_CHART_STEPS = 400


def trace_body_html(report: TraceReport) -> str:
    """The report's sections (without the page around them): also embedded in the doctor's page."""
    parts = [hp.section("Findings", findings_html(report.findings))]
    if report.multi_rank and report.rank_timings:
        parts.append(hp.section("Ranks side by side", _ranks(report)))
    for t in report.traces:
        parts.append(hp.section(f"Rank {t.rank}: {t.path}", *_trace(t)))
    notes = list(report.notes) + [f"skipped {s.path}: {s.reason}" for s in report.skipped]
    if notes:
        items = "".join(f"<li>{hp.esc(n)}</li>" for n in notes)
        parts.append(hp.section("Notes", f'<ul class="notes">{items}</ul>'))
    return "\n".join(parts)


def trace_html(report: TraceReport) -> str:
    """The whole HTML document."""
    title = "stave trace: " + ", ".join(t.path.rsplit("/", 1)[-1] for t in report.traces[:3])
    return hp.render_page(title, f"<h1>{hp.esc(title)}</h1>\n" + trace_body_html(report))


def _trace(t: TraceAnalysis) -> list[str]:
    out = [
        hp.key_values(
            [
                ("device", t.device_name or ("CPU only" if t.kind == "cpu" else "GPU")),
                ("rank", f"{t.rank} ({t.rank_source})"),
                ("events", f"{t.events:,}"),
                ("JSON size", fmt_bytes(t.uncompressed_bytes)),
                ("steps", str(t.step_count) if t.steps_marked else "no step markers: whole trace as one step"),
                ("step time (median)", fmt_ms(t.step_time_median_s)),
            ]
        ),
        "<h3>Additive breakdown</h3>",
        hp.stacked_bar([(f"{p} {fmt_share(t.breakdown_share[p])}", t.breakdown_share[p],
                         PART_COLORS.get(p, "#999999")) for p in t.parts]),
        hp.table(["part", "share", "mean per step"],
                 [(p, fmt_share(t.breakdown_share[p]), fmt_ms(t.part_mean_s(p))) for p in t.parts], numeric=(1, 2)),
    ]
    if len(t.steps) > 1:
        steps = t.steps[:MAX_CHART_STEPS]
        chart = StackedBars(
            x=[s.number for s in steps],
            series={p: [s.parts_s[p] * 1e3 for s in steps] for p in t.parts},
            title="Step time by part",
            xlabel="step",
            ylabel="ms",
            colors={p: PART_COLORS.get(p, "#999999") for p in t.parts},
        )
        out.append(hp.figure(to_svg(chart)))
    if t.gpu is not None:
        out.extend(_gpu(t))
    if t.top_ops:
        out.append("<h3>Top ops by self time</h3>")
        out.append(hp.table(["op", "calls", "self", "total"],
                            [(o.name, f"{o.calls:,}", fmt_seconds(o.self_s), fmt_seconds(o.total_s)) for o in t.top_ops],
                            numeric=(1, 2, 3)))
    if t.notes:
        out.append('<ul class="notes">' + "".join(f"<li>{hp.esc(n)}</li>" for n in t.notes) + "</ul>")
    return out


def _gpu(t: TraceAnalysis) -> list[str]:
    g = t.gpu
    assert g is not None
    out = [
        "<h3>GPU</h3>",
        hp.key_values(
            [
                ("utilization (kernels)", fmt_share(g.utilization)),
                ("memcpy / memset busy", f"{fmt_seconds(g.memcpy_busy_s)} / {fmt_seconds(g.memset_busy_s)}"),
                ("idle: host wait", fmt_seconds(g.idle_host_wait_s)),
                ("idle: short gaps", fmt_seconds(g.idle_short_gap_s)),
                ("idle: other", fmt_seconds(g.idle_other_s)),
                ("communication overlapped by compute",
                 fmt_share(g.communication_overlap) if g.communication_overlap is not None else "n/a"),
                ("fp16/bf16 kernels seen", "yes" if g.low_precision_in_use else "no"),
            ]
        ),
        "<h4>Top kernels</h4>",
        hp.table(["kernel", "group", "tensor cores", "precision", "calls", "total", "share"],
                 [(k.short_name, k.group, "yes" if k.tensor_core else "", k.precision, f"{k.count:,}",
                   fmt_seconds(k.total_s), fmt_share(k.share)) for k in g.top_kernels[:TOP_ROWS]],
                 numeric=(4, 5, 6)),
        "<h4>Idle time per stream</h4>",
        hp.table(["device", "stream", "activities", "busy", "host wait", "short gaps", "other"],
                 [(s.device, s.stream, f"{s.activities:,}", fmt_seconds(s.busy_s), fmt_seconds(s.host_wait_s),
                   fmt_seconds(s.short_gap_s), fmt_seconds(s.other_s)) for s in g.streams],
                 numeric=(2, 3, 4, 5, 6)),
    ]
    if g.memcpy:
        out.append("<h4>Memory copies</h4>")
        out.append(hp.table(["direction", "host memory", "count", "bytes", "time", "bandwidth"],
                            [(m.direction, m.host_memory, f"{m.count:,}", fmt_bytes(m.bytes), fmt_seconds(m.busy_s),
                              fmt_byte_rate(m.bandwidth_bytes_per_s)) for m in g.memcpy], numeric=(2, 3, 4, 5)))
    if t.syncs is not None and t.syncs.sites:
        out.append(f"<h4>Synchronizing calls ({t.syncs.calls}, {t.syncs.calls_per_step:.1f} per step)</h4>")
        out.append(hp.table(["call", "op", "source line", "count", "blocked", "GPU idle after"],
                            [(x.call, x.op or "n/a", f"{x.file}:{x.line} ({x.function})" if x.file else "n/a",
                              x.count, fmt_seconds(x.blocked_s), fmt_seconds(x.gpu_idle_after_s))
                             for x in t.syncs.sites], numeric=(3, 4, 5)))
    return out


def _ranks(report: TraceReport) -> str:
    by_rank = {t.rank: t for t in report.traces}
    parts = report.traces[0].parts
    rows = []
    for r in report.rank_timings:
        t = by_rank[r.rank]
        rows.append((r.rank, fmt_ms(r.step_time_s), *(fmt_ms(t.part_mean_s(p)) for p in parts),
                     fmt_ms(r.collective_wait_s), fmt_bytes(r.memory_peak_bytes)))
    return hp.table(["rank", "step", *parts, "in collectives", "peak memory"], rows,
                    numeric=tuple(range(0, len(parts) + 4)))
