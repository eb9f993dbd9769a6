"""The ``--verify`` section of the doctor's reports: measured speedup and interval beside the estimate.

Rendered from the JSON report's ``verify`` section (terminal: a rich table; HTML: a table), so the
three reports show the same numbers.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from stave.report import html_page as hp
from stave.report.units import fmt_speedup

_STATUS_TEXT = {
    "kept": "measured",
    "reverted": "reverted",
    "crashed": "crashed",
    "not_applicable": "does not apply here",
    "no_effect": "nothing to change",
    "not_verifiable": "not verifiable without code change",
    "baseline_failed": "script failed without a fix",
    "interrupted": "interrupted",
}
_STATUS_STYLE = {"kept": "green", "reverted": "yellow", "crashed": "red", "baseline_failed": "red"}


def measured_text(item: dict[str, Any]) -> str:
    """ "1.62x [1.55-1.70], 3 pairs" (or the dash when nothing was measured)."""
    if item.get("measured_speedup") is None:
        return "—"
    lo, hi = item["interval"]
    unit = {"samples_per_s": " (samples/s)", "mean_step_s": " (mean step)"}.get(item.get("statistic", ""), "")
    pairs = item.get("pairs", 0)
    return f"{fmt_speedup(item['measured_speedup'])} [{lo:.2f}–{hi:.2f}], {pairs} pair{'s' if pairs != 1 else ''}{unit}"


def outcome_text(item: dict[str, Any]) -> str:
    """The status in words, the loss check's verdict and the reason, in one line."""
    status = item["status"]
    loss = item.get("loss_check") or {}
    if status == "not_verifiable":
        parts = [item.get("reason") or _STATUS_TEXT[status]]
    else:
        word = _STATUS_TEXT.get(status, status)
        reason = item.get("reason")
        # "interrupted (Ctrl-C) after ..." says the status itself.
        parts = [] if reason and reason.startswith(word) else [word]
        if loss.get("text") and status == "kept":
            parts.append(loss["text"])
        if reason:
            parts.append(reason)
    if item.get("changes_learning"):
        parts.append("changes what is learned per step")
    return "; ".join(parts)


def verify_renderable(verify: dict[str, Any]) -> RenderableType:
    """The verification on the terminal: per finding, estimate and measurement on one line, the
    injected fix and the outcome under it; then the notes."""
    rows: list[RenderableType] = []
    for item in verify["findings"]:
        head = Text(f"{item['rank']}. ", style="bold")
        head.append(item["id"], style="bold")
        head.append(f"  est. {fmt_speedup(item['est_speedup'])}")
        if item.get("measured_speedup") is not None:
            head.append(f"  measured {measured_text(item)}", style="bold")
        rows.append(head)
        if item["fixes"]:
            rows.append(Text(f"   fix: {item['fixes']}"))
        rows.append(Text(f"   {outcome_text(item)}", style=_STATUS_STYLE.get(item["status"], "")))
    if verify["interrupted"]:
        rows.append(Text("• interrupted (Ctrl-C): the rows above show what was measured before it", style="yellow"))
    rows += [Text(f"• {n}") for n in verify["notes"]]
    return Group(*rows)


def verify_html(verify: dict[str, Any]) -> str:
    """The HTML section of the verification."""
    rows = [(item["rank"], item["id"], item["fixes"] or "—", fmt_speedup(item["est_speedup"]), measured_text(item),
             outcome_text(item)) for item in verify["findings"]]
    table = hp.table(("#", "Finding", "Injected fix", "Estimated", "Measured [interval]", "Outcome"), rows,
                     numeric=(0, 3, 4))
    notes = list(verify["notes"])
    if verify["interrupted"]:
        notes.insert(0, "interrupted (Ctrl-C): the rows above show what was measured before it")
    items = "".join(f"<li>{hp.esc(n)}</li>" for n in notes)
    return hp.section("Verification (--verify)", table, f"<ul>{items}</ul>", section_id="verify")
