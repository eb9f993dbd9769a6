"""`stave bench ladder SCRIPT` from the command line, on a planted script run in real child processes.

``tests/planted/tiny_batch.py`` is the script: a small MLP on an in-memory TensorDataset, so each
child run takes seconds. The fast test climbs a rung that does not apply on a CPU (one run of the
script); the slow one climbs two rungs with real timing, keep/revert and the loss check.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from stave.cli import main
from stave.report.schemas import load_schema

REPO = Path(__file__).resolve().parents[3]
SCRIPT = str(REPO / "tests" / "planted" / "tiny_batch.py")


def test_ladder_on_a_script_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    code = main(["bench", "ladder", "--steps", "2", "--rungs", "pin_memory", "--json", str(out), SCRIPT,
                 "--steps", "999"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, load_schema("stave.bench.script/1"))
    assert doc["schema"] == "stave.bench.script/1" and doc["script"] == SCRIPT
    # Everything after the script is the script's own (its --steps is not the ladder's).
    assert doc["args"] == ["--steps", "999"] and doc["options"]["steps"] == 2
    pin = next(r for r in doc["rungs"] if r["name"] == "pin_memory")
    assert pin["status"] == "skipped" and "no GPU" in pin["reason"]
    assert doc["best_speedup"] == 1.0 and doc["final_fixes"] == {} and doc["baseline_samples_per_s"] > 0
    assert "pinned host batches" in captured.out and "no fix helped measurably" in captured.out
    assert "written again by every run" in captured.err


@pytest.mark.slow  # 8 to 14 child runs of the script
@pytest.mark.timeout(900)
def test_ladder_on_a_script_times_a_fix_and_checks_its_inputs(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    # The fewest pairs the ladder accepts: this checks what is timed and compared, not how fast (speed
    # lives in the benchmarks).
    code = main(["bench", "ladder", "--steps", "10", "--pairs", "3", "--rungs", "batched_fetch", "--json", str(out),
                 SCRIPT])
    assert code == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    fetch = next(r for r in doc["rungs"] if r["name"] == "batched_fetch")
    trial = fetch["trials"][0]
    assert fetch["status"] in ("kept", "reverted") and trial["ratio"] > 0 and len(trial["window_rates"]) >= 3
    # Same samples in the same order, fetched whole: the inputs are the script's own.
    assert trial["input_dev"] == pytest.approx(0.0, abs=1e-6) and trial["loss_passed"]
    # The baseline, the yardstick, two runs per pair; the final comparison's pairs when the fix was kept
    # (the baseline row then shows their baseline windows).
    final_pairs = len(doc["rungs"][0]["trials"][0]["window_rates"]) if doc["rungs"][0]["trials"] else 0
    assert (final_pairs >= 3) == (fetch["status"] == "kept")
    assert doc["runs"] == 2 + 2 * len(trial["window_rates"]) + 2 * final_pairs


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--workload", "seed-resnet18", SCRIPT], "--workload: not for a script"),
        (["--allow-learning-changes"], "--allow-learning-changes applies to a script"),
        (["--rungs", "warp_drive", SCRIPT], "unknown script rung(s) warp_drive"),
        (["no_such_script.py"], "no_such_script.py"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "ladder", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
