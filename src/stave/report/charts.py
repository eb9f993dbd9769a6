"""Charts for the HTML reports and the bench's PNGs: inline SVG strings and PNG bytes.

A chart is described by a small frozen spec (:class:`StackedBars`, :class:`Lines`, :class:`Bars`)
and drawn by :func:`to_svg` or :func:`to_png`. matplotlib is imported only when a chart is drawn,
and drawn on its Agg canvas without pyplot, so rendering never changes the backend or the global
figure state of the process it runs in (the doctor renders inside the user's process).
"""

from __future__ import annotations

import hashlib
import io
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from stave.report.palette import series_color

# Charts are 8 x 3 inches: wide enough for a few hundred steps, short enough to stack several.
DEFAULT_SIZE_IN: tuple[float, float] = (8.0, 3.0)
DEFAULT_DPI = 100



@dataclass(frozen=True)
class StackedBars:
    """Bars at ``x`` with one stacked segment per series (series drawn bottom-up in order)."""

    x: Sequence[float]
    series: Mapping[str, Sequence[float]]
    title: str = ""
    xlabel: str = ""
    ylabel: str = ""
    colors: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Lines:
    """One line per series over ``x``; ``None`` values leave a gap (an absent reading, not 0)."""

    x: Sequence[float]
    series: Mapping[str, Sequence[float | None]]
    title: str = ""
    xlabel: str = ""
    ylabel: str = ""
    colors: Mapping[str, str] = field(default_factory=dict)
    y_from_zero: bool = True


@dataclass(frozen=True)
class Bars:
    """One bar per label, optionally annotated (e.g. "1.8x") and with a reference line (e.g. 1.0)."""

    labels: Sequence[str]
    values: Sequence[float]
    title: str = ""
    xlabel: str = ""
    ylabel: str = ""
    value_labels: Sequence[str] = ()
    colors: Sequence[str] = ()
    horizontal: bool = False
    reference: float | None = None


Chart = StackedBars | Lines | Bars


def to_svg(chart: Chart, size_in: tuple[float, float] = DEFAULT_SIZE_IN, standalone: bool = False) -> str:
    """The chart as SVG text. By default ready to inline in HTML: no XML prolog, no metadata block
    and no namespace declarations (HTML5 does not need them); ``standalone`` keeps a valid .svg file."""
    text = _render(chart, size_in, "svg", DEFAULT_DPI).decode("utf-8")
    if standalone:
        return text
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    return re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", text)


def to_png(chart: Chart, size_in: tuple[float, float] = DEFAULT_SIZE_IN, dpi: int = DEFAULT_DPI) -> bytes:
    """The chart as PNG bytes."""
    return _render(chart, size_in, "png", dpi)


def _render(chart: Chart, size_in: tuple[float, float], fmt: str, dpi: int) -> bytes:
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    _check(chart)
    # Bars have labels of any length (bench rung names) and need matplotlib's layout solver; the
    # step and time-series charts have short tick labels and a legend on the right, so fixed
    # margins fit them and save most of the drawing time.
    fig = Figure(figsize=size_in, dpi=dpi, layout="constrained" if isinstance(chart, Bars) else None)
    FigureCanvasAgg(fig)
    if not isinstance(chart, Bars):
        fig.subplots_adjust(left=0.08, right=0.80, bottom=0.17, top=0.89)
    ax = fig.add_subplot()
    if isinstance(chart, StackedBars):
        _draw_stacked(ax, chart)
    elif isinstance(chart, Lines):
        _draw_lines(ax, chart)
    else:
        _draw_bars(ax, chart)
    ax.set_title(_plain(chart.title), loc="left", fontsize=10)
    ax.set_xlabel(_plain(chart.xlabel))
    ax.set_ylabel(_plain(chart.ylabel))
    ax.grid(True, axis="y" if not (isinstance(chart, Bars) and chart.horizontal) else "x", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    buffer = io.BytesIO()
    # PNG metadata carries the matplotlib version and SVG a date; neither belongs in a report diff.
    metadata = {"Date": None} if fmt == "svg" else {"Software": None}
    # The salt seeds matplotlib's SVG element ids: derived from the spec, the ids are the same on every
    # run (stable report diffs) and differ between charts (several charts share one HTML page).
    salt = "stave-" + hashlib.sha1(repr(chart).encode("utf-8")).hexdigest()[:12]
    with matplotlib.rc_context({"svg.hashsalt": salt, "svg.fonttype": "none"}):
        fig.savefig(buffer, format=fmt, metadata=metadata)
    return buffer.getvalue()


def _check(chart: Chart) -> None:
    if isinstance(chart, (StackedBars, Lines)):
        for name, values in chart.series.items():
            if len(values) != len(chart.x):
                raise ValueError(f"series {name!r} has {len(values)} values for {len(chart.x)} x positions")
    elif len(chart.values) != len(chart.labels):
        raise ValueError(f"{len(chart.values)} values for {len(chart.labels)} labels")


def _plain(text: str) -> str:
    # A "$" pair would switch matplotlib to math mode (and a malformed one raises): keep text literal.
    return text.replace("$", r"\$")


def _color(colors: Mapping[str, str], name: str, index: int) -> str:
    return colors.get(name) or series_color(index)


def _draw_stacked(ax: Any, chart: StackedBars) -> None:
    x = list(chart.x)
    bottom = [0.0] * len(x)
    width = _bar_width(x)
    for i, (name, values) in enumerate(chart.series.items()):
        heights = [float(v) if v is not None else 0.0 for v in values]
        ax.bar(x, heights, width=width, bottom=bottom, color=_color(chart.colors, name, i),
               label=_plain(chart.labels.get(name, name)), linewidth=0)
        bottom = [b + h for b, h in zip(bottom, heights)]
    if chart.series:
        # Legend top-down in the order the segments stack, so it reads like the bars.
        handles, labels = ax.get_legend_handles_labels()
        ax.legend(handles[::-1], labels[::-1], loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8,
                  frameon=False)
    if all(float(v).is_integer() for v in x):
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(bottom=0)


def _bar_width(x: Sequence[float]) -> float:
    # Bars fill 90% of the smallest gap between positions, so uneven x (grouped steps) never overlap.
    ordered = sorted(set(float(v) for v in x))
    gaps = [b - a for a, b in zip(ordered, ordered[1:])]
    return 0.9 * (min(gaps) if gaps else 1.0)


def _draw_lines(ax: Any, chart: Lines) -> None:
    drawn = 0
    for i, (name, values) in enumerate(chart.series.items()):
        ys = [float(v) if v is not None else math.nan for v in values]
        if all(math.isnan(v) for v in ys):
            continue  # an absent counter gets no line rather than a flat line at 0
        ax.plot(list(chart.x), ys, color=_color(chart.colors, name, i), label=_plain(name), linewidth=1.2)
        drawn += 1
    if drawn:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    if chart.y_from_zero:
        ax.set_ylim(bottom=0)


def _draw_bars(ax: Any, chart: Bars) -> None:
    positions = list(range(len(chart.labels)))
    colors = [chart.colors[i % len(chart.colors)] if chart.colors else series_color(0) for i in positions]
    labels = [_plain(label) for label in chart.labels]
    if chart.horizontal:
        bars = ax.barh(positions, list(chart.values), color=colors)
        ax.set_yticks(positions, labels)
        ax.invert_yaxis()  # first label on top, as it reads in a table
        if chart.reference is not None:
            ax.axvline(chart.reference, color="#444444", linestyle="--", linewidth=1)
    else:
        bars = ax.bar(positions, list(chart.values), color=colors)
        ax.set_xticks(positions, labels, rotation=30 if len(positions) > 6 else 0, ha="right"
                      if len(positions) > 6 else "center")
        if chart.reference is not None:
            ax.axhline(chart.reference, color="#444444", linestyle="--", linewidth=1)
    if chart.value_labels:
        ax.bar_label(bars, labels=[_plain(v) for v in chart.value_labels], padding=2, fontsize=8)
