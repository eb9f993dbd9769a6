"""benchmarks/combine_results.py: a later run's row replaces an earlier one's; bad input exits 2."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.combine_results import main

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
EARLY = RESULTS / "scenarios-first-rows-cascadelake-s12.json"
LATE = RESULTS / "scenarios-first-rows-rest-cascadelake-s13.json"


def _rows(path: Path) -> dict[tuple[str, str], dict]:
    return {(r["scenario"], r["variant"]): r for r in json.loads(path.read_text())["rows"] if r["status"] != "skipped"}


def test_later_runs_replace_earlier_rows_and_the_rest_are_kept(tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    assert main([str(out), str(EARLY), str(LATE)]) == 0
    combined = _rows(out)
    early, late = _rows(EARLY), _rows(LATE)
    assert set(combined) == set(early) | set(late)
    both = set(early) & set(late)
    assert both  # the two runs share rows: the later one's result is the one kept
    for key in both:
        assert combined[key] == late[key]
    meta = json.loads(out.read_text())["meta"]
    assert [m["file"] for m in meta["combined_from"]] == [str(EARLY), str(LATE)]
    assert meta["minutes"] > 0 and "combine_results.py" in meta["command"]


def test_a_file_that_is_not_a_matrix_run_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main([str(tmp_path / "c.json"), str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "not a saved matrix run" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "c.json").exists()
