"""Cross-check against Holistic Trace Analysis (traceinsight, a bench dependency): same events, two
implementations, within 1% on every shared GPU fixture. Slow (HTA imports pandas/plotly)."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "traces"
GPU_FIXTURES = sorted(p.name for p in FIXTURES.glob("*.json.gz") if not p.name.startswith("cpu_only"))


@pytest.mark.slow
@pytest.mark.skipif(not FIXTURES.is_dir(), reason="shared fixtures not checked out beside the repo")
@pytest.mark.parametrize("name", GPU_FIXTURES)
def test_same_events_agree_with_hta(name: str, tmp_path: Path) -> None:
    pytest.importorskip("hta", reason="traceinsight (HTA) is a bench dependency: pip install -e '.[bench]'")
    from benchmarks.trace_hta_check import same_events

    rows = same_events(FIXTURES / name, tmp_path)
    assert len(rows) == 6
    for row in rows:
        assert row.stave == pytest.approx(row.hta, rel=0.01, abs=1.0), row
