"""Every finding ID a rule can produce has its docs page: why it happens, how to fix, how to verify."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stave.diagnose import registered_rules
from stave.diagnose.engine import INPUT_KINDS

DOCS = Path(__file__).resolve().parents[3] / "docs" / "findings"
ALL_IDS = sorted({r.id for kind in INPUT_KINDS for r in registered_rules(kind)})


def test_there_are_rules() -> None:
    assert len(ALL_IDS) >= 20


@pytest.mark.parametrize("finding_id", ALL_IDS)
def test_docs_page_has_the_three_parts(finding_id: str) -> None:
    page = DOCS / f"{finding_id}.md"
    assert page.exists(), f"{page} is missing"
    headings = [h.lower() for h in re.findall(r"^## (.+)$", page.read_text(), flags=re.M)]
    assert any(h.startswith(("why it happens", "what it means")) for h in headings), headings
    assert any("fix" in h for h in headings), headings
    assert any("verify" in h for h in headings), headings
    assert finding_id in (DOCS / "README.md").read_text()
