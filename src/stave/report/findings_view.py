"""A list of findings as a rich renderable (terminal) or an HTML fragment (shared by doctor and trace).

Each finding shows, in rank order: severity, estimated speedup, ID and title; the explanation;
the evidence as formatted numbers; the source lines to change; the fix as highlighted code; and
the path of its docs page.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Callable, Sequence

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from stave.diagnose.finding import Finding
from stave.report.palette import SEVERITY_STYLES
from stave.report.units import evidence_label, fmt_speedup, fmt_value

NO_FINDINGS = "No findings: nothing measured here points at a change worth making."

# The theme reads well on dark and light terminals because it uses the terminal's own ANSI colours.
SYNTAX_THEME = "ansi_dark"


# Shown beside an estimate whose timings were disturbed: other processes held the job's cores
# (MACHINE_BUSY, which says so itself) or the rule's own probe spread even when repeated (its text
# says which). "The machine was busy" would blame other processes where there may be none.
UNCERTAIN_NOTE = "(less certain: its timings were disturbed)"

def _headline(index: int, finding: Finding) -> Text:
    text = Text()
    text.append(f"{index}. ")
    text.append(f"[{finding.severity.upper()}]", style=SEVERITY_STYLES.get(finding.severity, ""))
    text.append(f" {finding.id}", style="bold")
    text.append(f"  est. {fmt_speedup(finding.est_speedup)}", style="bold")
    if finding.rank is not None:
        text.append(f"  (rank {finding.rank})")
    if not finding.certain:
        text.append(f"  {UNCERTAIN_NOTE}", style="dim")
    text.append(f"\n{finding.title}")
    return text


def _evidence_table(finding: Finding) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="dim", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in finding.evidence.items():
        # Text, not str: rich would parse "[...]" in a value as markup.
        table.add_row(Text(evidence_label(str(key))), Text(fmt_value(str(key), value)))
    return table


def finding_renderable(index: int, finding: Finding) -> RenderableType:
    """One finding, numbered ``index`` (1-based)."""
    parts: list[RenderableType] = [_headline(index, finding)]
    if finding.explanation:
        parts.append(Text(finding.explanation))
    if finding.evidence:
        parts.append(Text("evidence", style="dim italic"))
        parts.append(Padding(_evidence_table(finding), (0, 0, 0, 2)))
    if finding.lines:
        parts.append(Text("where: " + ", ".join(display_location(line) for line in finding.lines)))
    if finding.fix.strip():
        parts.append(Text("fix", style="dim italic"))
        code = Syntax(finding.fix.rstrip(), "python", theme=SYNTAX_THEME, word_wrap=True,
                      background_color="default")
        parts.append(Padding(code, (0, 0, 0, 2)))
    parts.append(Text(f"docs: {finding.docs}", style="dim"))
    return Padding(Group(*parts), (0, 0, 1, 0))


def findings_renderable(findings: Sequence[Finding], empty_message: str = NO_FINDINGS) -> RenderableType:
    """All findings in the order given (rank them first), or ``empty_message`` when there are none."""
    if not findings:
        return Text(empty_message)
    return Group(*(finding_renderable(i, f) for i, f in enumerate(findings, start=1)))


def display_location(location: str, cwd: str | None = None) -> str:
    """A "path:line" location with the path relative to the working directory when it lies under it
    (what a reader can open from where they ran stave); other paths stay absolute."""
    path, sep, line = location.rpartition(":")
    if not sep or not line.isdigit():
        path, line = location, ""
    base = os.path.abspath(cwd or os.getcwd())
    if os.path.isabs(path) and os.path.abspath(path).startswith(base + os.sep):
        path = os.path.relpath(path, base)
    return f"{path}:{line}" if line else path


# --- HTML ----------------------------------------------------------------------------------------


def highlight_python_html(code: str) -> str:
    """``code`` as highlighted HTML with inline styles (no stylesheet, no external resource)."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    return highlight(code, PythonLexer(), HtmlFormatter(noclasses=True, nobackground=True, cssclass="code"))


DocsHref = Callable[[str], "str | None"]


def finding_html(index: int, finding: Finding, docs_href: DocsHref | None = None) -> str:
    """One finding as an HTML ``<section id="finding-<index>">``; every user or rule string is escaped.

    ``docs_href`` maps a finding ID to a link that opens its docs page from where the page is written
    (None: no such page on this machine, the path is shown as text)."""
    esc = html.escape
    out = [f'<section class="finding sev-{esc(finding.severity)}" id="finding-{index}">']
    rank = f" <span class=\"rank\">rank {finding.rank}</span>" if finding.rank is not None else ""
    uncertain = f' <span class="uncertain">{esc(UNCERTAIN_NOTE)}</span>' if not finding.certain else ""
    out.append(
        f'<h3><span class="num">{index}.</span> <span class="sev">{esc(finding.severity.upper())}</span> '
        f'<code>{esc(finding.id)}</code> <span class="speedup">est. {esc(fmt_speedup(finding.est_speedup))}</span>'
        f"{rank}{uncertain}</h3>"
    )
    out.append(f'<p class="title">{esc(finding.title)}</p>')
    if finding.explanation:
        out.append(f"<p>{esc(finding.explanation)}</p>")
    if finding.evidence:
        rows = "".join(
            f'<tr><th title="{esc(str(k))}">{esc(evidence_label(str(k)))}</th><td>{esc(fmt_value(str(k), v))}</td></tr>'
            for k, v in finding.evidence.items()
        )
        out.append(f'<table class="evidence">{rows}</table>')
    if finding.lines:
        out.append("<p>where: " + ", ".join(f"<code>{esc(display_location(line))}</code>" for line in finding.lines)
                   + "</p>")
    if finding.fix.strip():
        out.append('<div class="fix">' + highlight_python_html(finding.fix.rstrip()) + "</div>")
    out.append(f'<p class="docs">docs: {docs_link(finding, docs_href)}</p>')
    out.append("</section>")
    return "\n".join(out)


def docs_link(finding: Finding, docs_href: DocsHref | None) -> str:
    """The finding's docs page as a link where ``docs_href`` finds it, else its path as code."""
    href = docs_href(finding.id) if docs_href is not None else None
    if href is None:
        return f"<code>{html.escape(finding.docs)}</code>"
    return f'<a href="{html.escape(href, quote=True)}"><code>{html.escape(finding.docs)}</code></a>'


def checkout_docs_href(html_dir: str | os.PathLike[str] | None) -> DocsHref | None:
    """Relative links from a page written in ``html_dir`` to the docs pages of the stave checkout it
    runs from (``make demo``, an editable install); None where stave is installed without its docs.

    Relative, not absolute: the report and the checkout can move together, and no machine path is
    written into a page that is shared.
    """
    if html_dir is None:
        return None
    docs = Path(__file__).resolve().parents[3] / "docs" / "findings"
    if not docs.is_dir():
        return None
    base = Path(os.path.abspath(html_dir))

    def href(finding_id: str) -> str | None:
        page = docs / f"{finding_id}.md"
        return Path(os.path.relpath(page, base)).as_posix() if page.is_file() else None

    return href


def findings_html(findings: Sequence[Finding], empty_message: str = NO_FINDINGS,
                  docs_href: DocsHref | None = None) -> str:
    """All findings as HTML (styled by :mod:`stave.report.html_page`'s CSS)."""
    if not findings:
        return f'<p class="empty">{html.escape(empty_message)}</p>'
    return "\n".join(finding_html(i, f, docs_href) for i, f in enumerate(findings, start=1))
