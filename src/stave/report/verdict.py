"""The verdict: what is wrong and what fixing it would buy, said first in every doctor report.

The terminal report opens with :func:`headline_text` (one line); the HTML report's first screen is
:func:`verdict_html`: the top findings with their estimated speedup, the one-line evidence and the
fix, and the measured step time beside the achievable one when the result carries a step-model
estimate. Inputs are the ``stave.doctor/1`` dict and the ranked findings.
"""

from __future__ import annotations

import html
from typing import Any, Sequence

from stave.diagnose.finding import MACHINE_IDS, Finding
from stave.report.findings_view import DocsHref, docs_link, highlight_python_html
from stave.report.units import evidence_label, fmt_seconds, fmt_speedup, fmt_value

# A desktop screen holds about three findings with their fixes; the rest are one click below.
MAX_VERDICT_FINDINGS = 3
# Evidence items on a finding's one line: enough to show the numbers behind the title, short enough
# to stay one line at desktop width.
MAX_EVIDENCE_ITEMS = 3

# Where a step-model estimate of the step time with every fix applied may sit in the report dict
# (the summary, or a section of its own), in the order they are looked up.
_ACHIEVABLE_KEYS: tuple[tuple[str, ...], ...] = (
    ("summary", "achievable_step_s"),
    ("step_model", "achievable_step_s"),
    ("model", "achievable_step_s"),
)


def measured_step_s(report: dict[str, Any]) -> float | None:
    """The measured median step time (None when no step was counted)."""
    summary = report.get("summary") or {}
    if not summary.get("steps"):
        return None
    return (summary.get("step_time_s") or {}).get("median")


def achievable_step_s(report: dict[str, Any]) -> float | None:
    """The step time the step model expects with every finding's fix applied, if the report has one."""
    for path in _ACHIEVABLE_KEYS:
        node: Any = report
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, (int, float)) and not isinstance(node, bool) and node > 0:
            return float(node)
    return None


def step_text(report: dict[str, Any]) -> str:
    """ "step 366 ms (median) → 250 ms with every fix" (the second part only with a step model)."""
    measured, achievable = measured_step_s(report), achievable_step_s(report)
    if measured is None:
        return "no step counted"
    text = f"step {fmt_seconds(measured)} (median)"
    if achievable is not None:
        text += f" → {fmt_seconds(achievable)} with every fix"
    return text


def evidence_line(finding: Finding, limit: int = MAX_EVIDENCE_ITEMS) -> str:
    """The first few evidence items as "Label value · Label value"."""
    items = list(finding.evidence.items())[:limit]
    return " · ".join(f"{evidence_label(str(k))} {fmt_value(str(k), v)}" for k, v in items)


def speedup_findings(findings: Sequence[Finding]) -> list[Finding]:
    """The ranked findings whose fix is estimated to make the step faster (est. speedup above 1.0x);
    the others (correctness, risk, "keep as is") stay in the full list below the verdict."""
    return [f for f in findings if f.est_speedup > 1.0]


def headline_text(report: dict[str, Any], findings: Sequence[Finding]) -> str:
    """The verdict in one line (short enough for a 100-column terminal): the top finding and its
    estimated speedup, how many more, the step time measured and, with a step model, achievable."""
    if not findings:
        return f"Verdict: no findings · {step_text(report)}"
    faster = speedup_findings(findings)
    if findings[0].id in MACHINE_IDS:
        # The machine, not the job, comes first whatever its estimate (a VM's steal or another job
        # can hide the job's own demand, so the model may price giving the cores back at 1.0x).
        job = [f for f in faster if f.id not in MACHINE_IDS]
        lead = f"{findings[0].id} (the machine, not the job)"
        if job:
            lead += f" · then {job[0].id} est. {fmt_speedup(job[0].est_speedup)}"
        more = len(findings) - 1 - bool(job)
        others = f" · {more} more" if more else ""
        return f"Verdict: {lead}{others} · {step_text(report)}"
    if not faster:
        return f"Verdict: no finding estimates a speedup ({len(findings)} noted below) · {step_text(report)}"
    top = faster[0]
    more = len(findings) - 1
    others = f" · {more} more finding{'' if more == 1 else 's'}" if more else ""
    return f"Verdict: {top.id} est. {fmt_speedup(top.est_speedup)}{others} · {step_text(report)}"


def verdict_html(report: dict[str, Any], findings: Sequence[Finding], docs_href: DocsHref | None = None) -> str:
    """The first screen of the HTML report: step times, then the top findings with evidence and fix.

    ``findings`` are ranked; each card links to the full finding below (``#finding-<n>``).
    """
    esc = html.escape
    measured, achievable = measured_step_s(report), achievable_step_s(report)
    times = [_big(fmt_seconds(measured), "measured step time (median)")]
    if achievable is not None and measured is not None:
        times.append(_big(fmt_seconds(achievable), f"achievable with every fix applied "
                                                   f"({fmt_speedup(measured / achievable)}, step model)"))
    out = ['<section class="verdict" id="verdict">', "<h2>Verdict</h2>", f'<div class="times">{"".join(times)}</div>']
    if not findings:
        out.append('<p class="empty">No findings: nothing measured here points at a change worth making.</p>')
    elif not speedup_findings(findings):
        out.append(f'<p class="empty">No finding estimates a speedup; {len(findings)} noted in '
                   f'<a href="#findings">Findings</a> below.</p>')
    else:
        out.append('<ol class="top">')
        # (number in the full list below, finding) of the first few that would make the step faster
        shown = [(i, f) for i, f in enumerate(findings, start=1)
                 if f.est_speedup > 1.0 or f.id in MACHINE_IDS][:MAX_VERDICT_FINDINGS]
        out += [_card(index, finding, docs_href) for index, finding in shown]
        out.append("</ol>")
        rest = len(findings) - len(shown)
        if rest > 0:
            out.append(f'<p class="muted">{rest} more finding{"" if rest == 1 else "s"} in '
                       f'<a href="#findings">Findings</a> below.</p>')
    out.append("</section>")
    return "\n".join(out)


def _card(index: int, finding: Finding, docs_href: DocsHref | None) -> str:
    """One finding on the first screen: speedup, ID, title, one line of evidence, the fix, links."""
    esc = html.escape
    out = [f'<li class="card sev-{esc(finding.severity)}">',
           f'<div class="head"><span class="speedup">est. {esc(fmt_speedup(finding.est_speedup))}</span> '
           f'<code>{esc(finding.id)}</code> <span class="sev">{esc(finding.severity.upper())}</span></div>',
           f'<p class="title">{esc(finding.title)}</p>']
    if finding.evidence:
        out.append(f'<p class="evidence">{esc(evidence_line(finding))}</p>')
    if finding.fix.strip():
        out.append('<div class="fix">' + highlight_python_html(finding.fix.rstrip()) + "</div>")
    out.append(f'<p class="more"><a href="#finding-{index}">details</a> · docs: {docs_link(finding, docs_href)}</p>')
    out.append("</li>")
    return "\n".join(out)


def _big(value: str, label: str) -> str:
    return f'<div class="time"><span class="big">{html.escape(value)}</span> {html.escape(label)}</div>'
