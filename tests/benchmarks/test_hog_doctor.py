"""benchmarks/hog_doctor.py: the hog goal's verdict per row, the quiet rows it reads, bad names exit 2."""

from __future__ import annotations

import json
import os
from pathlib import Path

from benchmarks.hog_doctor import main, quiet_findings, verdict


def test_verdict_follows_the_hog_goal() -> None:
    # MACHINE_BUSY first lets the second finding count; it must be the quiet row's top.
    assert verdict("SMALL_BATCH", ["SMALL_BATCH"], ["MACHINE_BUSY", "SMALL_BATCH"]) == "consistent"
    assert verdict("SMALL_BATCH", ["SMALL_BATCH"], ["MACHINE_BUSY"]) == "miss"
    assert verdict("SMALL_BATCH", ["SMALL_BATCH"], ["MACHINE_BUSY", "OPTIMIZER_UNFUSED", "SMALL_BATCH"]) == "miss"
    assert verdict("SMALL_BATCH", None, ["MACHINE_BUSY", "SMALL_BATCH"]) == "no quiet row"
    # A healthy control: MACHINE_BUSY only (or nothing).
    assert verdict("", [], ["MACHINE_BUSY"]) == "consistent"
    assert verdict("", [], []) == "consistent"
    assert verdict("", [], ["MACHINE_BUSY", "OPTIMIZER_UNFUSED"]) == "miss"


def test_the_newest_results_file_holds_the_quiet_row(tmp_path: Path) -> None:
    old, new = tmp_path / "a.json", tmp_path / "b.json"
    row = {"scenario": "s", "variant": "base/2c", "status": "ok"}
    old.write_text(json.dumps({"rows": [dict(row, findings=[["X", 1.5, "warning"]])]}))
    new.write_text(json.dumps({"rows": [dict(row, findings=[["Y", 1.2, "info"]]),
                                        dict(row, variant="base/1c", status="failed", findings=[])]}))
    os.utime(old, (1, 1))
    got = quiet_findings([str(new), str(old)])
    assert got == {("s", "base/2c"): ["Y"]}


def test_an_unknown_scenario_is_a_usage_error(capsys) -> None:
    assert main(["--only", "no_such_scenario"]) == 2
    assert "no_such_scenario" in capsys.readouterr().err
