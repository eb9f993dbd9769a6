"""The ladder as a self-contained HTML page and a PNG chart (x baseline per rung)."""

from __future__ import annotations

from stave.report.bench_table import rate_label, scaled_rate, summary_lines
from stave.bench.result import BASELINE, KEPT, SKIPPED, LadderResult
from stave.report.charts import Bars, to_png, to_svg
from stave.report.html_page import esc, key_values, render_page, section, table

KEPT_COLOR = "#009E73"
REVERTED_COLOR = "#BBBBBB"


def ladder_chart(result: LadderResult) -> Bars:
    """One bar per timed rung: its speed over the baseline; kept rungs in colour."""
    labels, values, texts, colors = [], [], [], []
    for rung in result.rungs:
        shown = rung.shown
        if rung.status == SKIPPED or shown is None or shown.x_baseline is None:
            continue
        labels.append(f"{rung.title}: {shown.label}" if rung.status != BASELINE else "baseline")
        values.append(shown.x_baseline)
        texts.append(f"{shown.x_baseline:.2f}x {'kept' if rung.status in (KEPT, BASELINE) else 'reverted'}")
        colors.append(KEPT_COLOR if rung.status in (KEPT, BASELINE) else REVERTED_COLOR)
    return Bars(
        labels=labels,
        values=values,
        title=f"{result.workload}: speed over the baseline per rung",
        xlabel="x baseline",
        value_labels=texts,
        colors=colors,
        horizontal=True,
        reference=1.0,
    )


def _size(chart: Bars) -> tuple[float, float]:
    # A bar per timed rung: the figure grows with their number so labels never overlap.
    return (9.0, 0.45 * max(4, len(chart.labels)) + 1.0)


def chart_png(result: LadderResult) -> bytes:
    """The chart as PNG bytes."""
    chart = ladder_chart(result)
    return to_png(chart, size_in=_size(chart))


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2%}"


def ladder_html(result: LadderResult) -> str:
    """The whole report as one HTML document (every string escaped)."""
    unit = rate_label(result)
    rows = []
    for rung in result.rungs:
        shown = rung.shown
        rate = scaled_rate(result, shown.samples_per_s) if shown else None
        rows.append(
            [
                rung.title,
                shown.label if shown and rung.status != BASELINE else ("as written" if shown else "-"),
                "-" if rate is None else f"{rate:,.1f}",
                "-" if not shown or shown.x_baseline is None else f"{shown.x_baseline:.2f}x",
                "-" if not shown or shown.data_wait_share is None else f"{shown.data_wait_share:.0%}",
                _pct(shown.max_loss_dev) if shown else "-",
                rung.status,
                rung.reason,
            ]
        )
    chart = ladder_chart(result)
    machine = [(k, v) for k, v in result.machine.items() if v is not None]
    body = [
        f"<h1>stave bench ladder: {esc(result.workload)}</h1>",
        f'<p class="sub">{esc(result.description)}</p>',
        section("Result", "".join(f"<p>{esc(line)}</p>" for line in summary_lines(result))),
        section(
            "Rungs",
            table(
                ["rung", "setting", unit, "x baseline", "data wait", "loss dev", "status", "reason"],
                rows,
                numeric=(2, 3, 4, 5),
            ),
        ),
        section("Chart", f'<div class="chart">{to_svg(chart, size_in=_size(chart))}</div>'),
        section("Final configuration", f"<pre>{esc(result.code)}</pre>"),
        section("Machine", key_values(machine)),
    ]
    return render_page(f"stave bench ladder: {result.workload}", "\n".join(body))
