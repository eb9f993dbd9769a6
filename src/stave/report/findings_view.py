"""A list of findings as a rich renderable (terminal) or an HTML fragment (shared by doctor and trace).

Each finding shows, in rank order: severity, estimated speedup, ID and title; the explanation;
the evidence as formatted numbers; the source lines to change; the fix as highlighted code; and
the path of its docs page.
"""

from __future__ import annotations

import html
from typing import Sequence

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from stave.diagnose.finding import Finding
from stave.report.palette import SEVERITY_STYLES
from stave.report.units import fmt_speedup, fmt_value

NO_FINDINGS = "No findings: nothing measured here points at a change worth making."

# The theme reads well on dark and light terminals because it uses the terminal's own ANSI colours.
SYNTAX_THEME = "ansi_dark"


# Shown beside an estimate measured while other processes held the job's cores (MACHINE_BUSY).
UNCERTAIN_NOTE = "(less certain: the machine was busy)"

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
        table.add_row(Text(str(key)), Text(fmt_value(str(key), value)))
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
        parts.append(Text("where: " + ", ".join(finding.lines)))
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


# --- HTML ----------------------------------------------------------------------------------------


def highlight_python_html(code: str) -> str:
    """``code`` as highlighted HTML with inline styles (no stylesheet, no external resource)."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    return highlight(code, PythonLexer(), HtmlFormatter(noclasses=True, nobackground=True, cssclass="code"))


def finding_html(index: int, finding: Finding) -> str:
    """One finding as an HTML ``<section>``; every user or rule string is escaped."""
    esc = html.escape
    out = [f'<section class="finding sev-{esc(finding.severity)}">']
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
            f"<tr><th>{esc(str(k))}</th><td>{esc(fmt_value(str(k), v))}</td></tr>"
            for k, v in finding.evidence.items()
        )
        out.append(f'<table class="evidence">{rows}</table>')
    if finding.lines:
        out.append("<p>where: " + ", ".join(f"<code>{esc(line)}</code>" for line in finding.lines) + "</p>")
    if finding.fix.strip():
        out.append('<div class="fix">' + highlight_python_html(finding.fix.rstrip()) + "</div>")
    out.append(f'<p class="docs">docs: <code>{esc(finding.docs)}</code></p>')
    out.append("</section>")
    return "\n".join(out)


def findings_html(findings: Sequence[Finding], empty_message: str = NO_FINDINGS) -> str:
    """All findings as HTML (styled by :mod:`stave.report.html_page`'s CSS)."""
    if not findings:
        return f'<p class="empty">{html.escape(empty_message)}</p>'
    return "\n".join(finding_html(i, f) for i, f in enumerate(findings, start=1))
