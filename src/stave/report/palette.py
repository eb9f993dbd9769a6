"""Colours shared by every report, so a phase has the same colour in the terminal, HTML and charts.

The phase colours are the Okabe-Ito palette, which stays distinguishable for the common forms of
colour blindness; the data-loading phases are warm, the compute phases cool, ``other`` grey.
"""

from __future__ import annotations

PHASE_COLORS: dict[str, str] = {
    "data_wait": "#D55E00",
    "h2d": "#E69F00",
    "forward": "#0072B2",
    "backward": "#56B4E9",
    "optimizer": "#009E73",
    "other": "#999999",
}

# Human labels of the phases, in report order.
PHASE_LABELS: dict[str, str] = {
    "data_wait": "data wait",
    "h2d": "host→device",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer",
    "other": "other",
}

SEVERITY_COLORS: dict[str, str] = {
    "critical": "#C0392B",
    "warning": "#B9770E",
    "info": "#2E86C1",
}

# rich styles of the severities (terminal colours adapt to the user's theme better than hex).
SEVERITY_STYLES: dict[str, str] = {
    "critical": "bold red",
    "warning": "bold yellow",
    "info": "cyan",
}

# Colours for other series (utilization lines, bench bars), in order of use.
SERIES_COLORS: tuple[str, ...] = (
    "#0072B2",
    "#D55E00",
    "#009E73",
    "#CC79A7",
    "#E69F00",
    "#56B4E9",
    "#F0E442",
    "#000000",
)

def phase_color(phase: str) -> str:
    """The colour of a phase (grey for a name that is not a phase)."""
    return PHASE_COLORS.get(phase, PHASE_COLORS["other"])


def series_color(index: int) -> str:
    """The colour of the ``index``-th series of a chart (cycles through the palette)."""
    return SERIES_COLORS[index % len(SERIES_COLORS)]
