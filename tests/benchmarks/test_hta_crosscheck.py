"""Cross-check against Holistic Trace Analysis (traceinsight, a bench dependency): every quantity of
the ``hta`` section, both scopes, within 1 % or 1 µs or inside a listed category, on every shared GPU
fixture (and on HTA's own test data when STAVE_HTA_DATA names its tests/data folder). Slow (HTA
imports pandas/plotly)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "traces"
HTA_DATA = Path(os.environ.get("STAVE_HTA_DATA", "/nonexistent"))
TRACES = sorted(p for p in FIXTURES.glob("*.json.gz") if not p.name.startswith("cpu_only")) + sorted(
    p for p in HTA_DATA.rglob("*.json*") if p.is_file() and p.stat().st_size > 0)


@pytest.mark.slow
@pytest.mark.skipif(not TRACES, reason="no traces: shared fixtures not checked out beside the repo")
@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_hta_section_agrees_with_hta(path: Path, tmp_path: Path) -> None:
    pytest.importorskip("hta", reason="traceinsight (HTA) is a bench dependency: pip install -e '.[bench]'")
    from stave.errors import StaveError
    from benchmarks.trace_hta_check import compare

    try:
        rows = compare(path, tmp_path)
    except StaveError as exc:
        pytest.skip(f"not a trace stave reads: {exc}")
    if rows is None:
        pytest.skip("HTA cannot analyse this trace (or it has no GPU work)")
    assert rows
    bad = [r for r in rows if not r.passes]
    assert not bad, bad
