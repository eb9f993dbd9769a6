"""The estimate-vs-measured benchmark's bookkeeping: planted table, agreement, docs table (no runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import doctor_estimates as de
from stave.diagnose.engine import registered_rules
from stave.errors import OutputError


def test_every_planted_case_has_its_script_and_a_known_finding(repo_root: Path):
    ids = {r.id for r in registered_rules("doctor")}
    for case in de.PLANTED:
        script = repo_root / "tests" / "planted" / f"{case.name}.py"
        text = script.read_text(encoding="utf-8")
        assert "--fixed" in text or "args.fixed" in text
        if case.finding is not None:
            assert case.finding in ids
            assert f"expect {case.finding}" in text.split('"""')[1]
        assert case.statistic in ("median_step_s", "mean_step_s", "samples_per_s")


def _result(est, measured, finding="DATA_IO_BOUND"):
    r = de.CaseResult("io_latency", finding, finding, est, "mean_step_s", measured_speedup=measured, spread=0.1)
    ratio = (est or 1.0) / measured
    r.agrees = 1 / de.AGREEMENT_FACTOR <= ratio <= de.AGREEMENT_FACTOR
    return r


def test_measure_ratio_direction_and_agreement(monkeypatch, repo_root):
    timings = iter([{"mean_step_s": 0.2}, {"mean_step_s": 0.05}, {"mean_step_s": 0.04}, {"mean_step_s": 0.2}])
    monkeypatch.setattr(de, "plain_timing", lambda case, root, fixed: next(timings))
    case = next(c for c in de.PLANTED if c.name == "io_latency")
    result = de.CaseResult(case.name, case.finding, case.finding, 3.0, case.statistic)
    de.measure(case, repo_root, 2, result)
    # Pair 1 runs baseline first (0.2 vs 0.05), pair 2 fixed first (0.04 vs 0.2): ratios 4 and 5.
    assert result.ratios == pytest.approx([4.0, 5.0])
    assert result.measured_speedup == pytest.approx(4.5)
    assert result.agrees is True
    result.est_speedup = 1.5
    de.measure(case, repo_root, 0, result)  # no new pairs: recompute agreement only
    assert result.agrees is False


def test_docs_table_replaces_only_the_marked_block(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# B\n\nintro\n{de.DOCS_BEGIN}\nold\n{de.DOCS_END}\n\n## Next\nkept\n", encoding="utf-8")
    de.write_docs(doc, [_result(2.0, 1.6), _result(None, 1.02, finding=None)], pairs=3, seconds=600)
    text = doc.read_text(encoding="utf-8")
    assert "old" not in text and "## Next\nkept" in text and text.startswith("# B\n\nintro\n")
    assert "| `io_latency` | DATA_IO_BOUND | DATA_IO_BOUND | 2.00x | 1.60x | 10% | mean_step_s | yes |" in text
    assert "(none: healthy)" in text
    doc.write_text("# no markers\n", encoding="utf-8")
    with pytest.raises(OutputError):
        de.write_docs(doc, [], pairs=1, seconds=1)
