"""One self-contained HTML document, and the small building blocks every HTML report uses.

The page has its CSS inline and references nothing outside itself (no fonts, scripts or images
from the network), so a report opens the same on an air-gapped cluster, in a CI artifact viewer
and years later. Every string from a user's job goes through :func:`esc`.
"""

from __future__ import annotations

import html
from typing import Iterable, Sequence

_CSS = """
:root { --fg: #1d2125; --muted: #5f6b76; --line: #d9dee3; --bg: #ffffff; --panel: #f5f7f9; }
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 32px 48px; color: var(--fg); background: var(--bg);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1100px; margin: 0 auto; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 32px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 15px; margin: 0 0 4px; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace;
  font-size: 12.5px; }
p.sub, .muted { color: var(--muted); }
table { border-collapse: collapse; margin: 8px 0; }
th, td { padding: 3px 10px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
table.kv th { color: var(--muted); font-weight: normal; }
.bar { display: flex; height: 22px; width: 100%; border-radius: 3px; overflow: hidden; margin: 8px 0; }
.bar span { display: block; height: 100%; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 16px; margin: 4px 0 8px; }
.legend i { display: inline-block; width: 10px; height: 10px; margin-right: 5px; border-radius: 2px; }
.chart svg { max-width: 100%; height: auto; }
.finding { border: 1px solid var(--line); border-left: 5px solid var(--muted); border-radius: 4px;
  padding: 10px 14px; margin: 12px 0; background: var(--panel); }
.finding.sev-critical { border-left-color: #C0392B; }
.finding.sev-warning { border-left-color: #B9770E; }
.finding.sev-info { border-left-color: #2E86C1; }
.finding .sev { font-size: 12px; font-weight: 700; letter-spacing: 0.04em; }
.finding.sev-critical .sev { color: #C0392B; }
.finding.sev-warning .sev { color: #B9770E; }
.finding.sev-info .sev { color: #2E86C1; }
.finding .speedup { float: right; }
.finding .title { font-weight: 600; margin: 2px 0 6px; }
.finding table.evidence th { color: var(--muted); font-weight: normal; }
.fix pre { background: var(--bg); border: 1px solid var(--line); border-radius: 3px; padding: 8px 10px;
  overflow-x: auto; margin: 6px 0; }
.docs { font-size: 12px; color: var(--muted); margin: 4px 0 0; }
ul.notes li { color: var(--muted); }
.verdict { border: 1px solid var(--line); border-radius: 6px; padding: 4px 18px 10px; margin: 12px 0 20px; }
.verdict h2 { margin-top: 10px; }
.verdict .times { display: flex; flex-wrap: wrap; gap: 8px 40px; margin: 4px 0 8px; color: var(--muted); }
.verdict .big { font-size: 24px; font-weight: 700; color: var(--fg); font-variant-numeric: tabular-nums; }
.verdict ol.top { list-style: none; padding: 0; margin: 0; }
.verdict .card { border-left: 5px solid var(--muted); background: var(--panel); border-radius: 4px;
  padding: 6px 12px; margin: 8px 0; }
.verdict .card.sev-critical { border-left-color: #C0392B; }
.verdict .card.sev-warning { border-left-color: #B9770E; }
.verdict .card.sev-info { border-left-color: #2E86C1; }
.verdict .head { font-size: 15px; }
.verdict .speedup { font-weight: 700; font-size: 16px; margin-right: 6px; }
.verdict .sev { font-size: 11px; font-weight: 700; letter-spacing: 0.04em; color: var(--muted); }
.verdict .title { font-weight: 600; margin: 2px 0; }
.verdict .evidence, .verdict .more { color: var(--muted); margin: 2px 0; font-size: 13px; }
.verdict .fix pre { margin: 4px 0; padding: 6px 10px; }
"""


def esc(value: object) -> str:
    """HTML-escape ``value`` (quotes included, so it is safe inside attributes too)."""
    return html.escape(str(value), quote=True)


def render_page(title: str, body_html: str) -> str:
    """A complete HTML document with ``title`` (escaped) and ``body_html`` (trusted, already built)."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{_CSS}</style>\n</head>\n"
        f"<body>\n<main>\n{body_html}\n</main>\n</body>\n</html>\n"
    )


def section(title: str, *parts: str, section_id: str = "") -> str:
    """An ``<h2>`` section: the title is escaped, the parts are trusted HTML; ``section_id`` makes it
    a link target (``#section_id``)."""
    ident = f' id="{esc(section_id)}"' if section_id else ""
    return f"<section{ident}>\n<h2>{esc(title)}</h2>\n" + "\n".join(p for p in parts if p) + "\n</section>"


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], numeric: Sequence[int] = (),
          css_class: str = "") -> str:
    """A table; every cell is escaped; columns whose index is in ``numeric`` align right."""
    num = set(numeric)
    cls = f' class="{esc(css_class)}"' if css_class else ""
    head = "".join(f'<th{" class=num" if i in num else ""}>{esc(h)}</th>' for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f'<td{" class=num" if i in num else ""}>{esc(c)}</td>' for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def key_values(pairs: Iterable[tuple[str, object]]) -> str:
    """A two-column table of labels and values (both escaped)."""
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in pairs)
    return f'<table class="kv">{rows}</table>'


def stacked_bar(parts: Sequence[tuple[str, float, str]]) -> str:
    """A one-line stacked bar of (label, fraction, colour) with its legend, in CSS only."""
    spans = "".join(
        f'<span style="width:{max(0.0, frac) * 100:.3f}%;background:{esc(color)}" title="{esc(label)}"></span>'
        for label, frac, color in parts
    )
    legend = "".join(
        f'<span><i style="background:{esc(color)}"></i>{esc(label)}</span>' for label, _frac, color in parts
    )
    return f'<div class="bar">{spans}</div><div class="legend">{legend}</div>'


def figure(svg: str, caption: str = "") -> str:
    """An inline SVG chart (trusted: made by :mod:`stave.report.charts`) with an escaped caption."""
    cap = f'<p class="muted">{esc(caption)}</p>' if caption else ""
    return f'<div class="chart">{svg}{cap}</div>'
