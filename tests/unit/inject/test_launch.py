"""The parent side's reading of a child's result: step statistics, and a result file it cannot trust blindly."""

from __future__ import annotations

import math

import pytest

from stave.capture.runner import Target
from stave.inject.launch import ChildResult, ChildRun
from stave.inject.selection import request, selection


def test_step_statistics_after_warmup() -> None:
    # Step ends at 0, 1, 2, 3, 4, 10 s: the last step is a 6 s stall (an epoch start).
    result = ChildResult(0, "steps", step_end_s=[0.0, 1.0, 2.0, 3.0, 4.0, 10.0], samples=[8] * 6)
    assert result.step_times_s(1) == [1.0, 1.0, 1.0, 6.0]
    assert result.median_step_s(1) == 1.0 and result.mean_step_s(1) == pytest.approx(2.25)
    assert result.samples_per_s(1) == pytest.approx(32 / 9)
    assert ChildResult(0, "steps", step_end_s=[0.0, 1.0]).median_step_s(0) is None
    assert result.ok and not ChildResult(1, "error").ok and not ChildResult(0, "interrupt").ok


def test_from_dict_keeps_only_well_typed_values() -> None:
    data = {"exit_code": 0, "stopped_by": "steps", "error": 3, "step_end_s": [0.1, "x", 0.3], "samples": [4, 4],
            "losses": [2.0, None, "x"], "input_stats": [[0.0, None]], "fixes": [{"id": "threads"}, "junk"], "wall_s": 2}
    result = ChildResult.from_dict(data, "tail")
    assert result.step_end_s == [0.1, 0.3] and result.error is None
    assert result.losses[0] == 2.0 and math.isnan(result.losses[1]) and len(result.losses) == 2
    assert result.input_stats[0][0] == 0.0 and math.isnan(result.input_stats[0][1])
    assert result.fixes == [{"id": "threads"}] and result.stderr_tail == "tail"


def test_command_line_carries_the_selection_and_the_target() -> None:
    run = ChildRun(Target("pkg.train", ("--lr", "1"), module=True), selection(request("threads", threads=2)),
                   steps=12, seed=7, perturb_bf16=True)
    cmd = run.command("/tmp/out.json")
    assert cmd[1:3] == ["-m", "stave.inject.child"] and "--perturb-bf16" in cmd
    assert cmd[cmd.index("--steps") + 1] == "12" and cmd[cmd.index("--seed") + 1] == "7"
    assert '"threads": 2' in cmd[cmd.index("--fixes") + 1]
    assert cmd[-5:] == ["-m", "--", "pkg.train", "--lr", "1"]
