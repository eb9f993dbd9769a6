"""RECOMPILES on synthetic records, and the dynamo counters it reads on a real (eager-backend) compile."""

from __future__ import annotations

import pytest
import torch
from synth_records import healthy_config, healthy_record, run_rule

from stave.capture.compile_stats import read_compile_stats


def compiled_record(frames_counted: int | None, compile_s: float, reasons: list[str]):
    cfg = healthy_config(compiled=True, compile_frames=(frames_counted or 0) + 1,
                         compile_frames_counted=frames_counted, compile_s_counted=compile_s,
                         recompile_reasons=reasons)
    return healthy_record(config=cfg)


def test_recompiles_names_the_changing_dimension_and_prices_the_compile_time():
    reasons = ["0/0: tensor 'x' size mismatch at index 1. expected 128, actual 97"]
    f = run_rule("RECOMPILES", compiled_record(12, 1.2, reasons))
    assert f is not None
    assert f.evidence["changing_tensor"] == "x" and f.evidence["changing_dim"] == "1"
    assert "mark_dynamic(x, 1)" in f.fix
    # 1.2 s over 40 counted steps of 100 ms: 30 ms of each step's forward is compiling.
    assert abs(f.evidence["compile_s_per_step"] - 1.2 / 40) < 1e-6
    assert 1.3 < f.est_speedup <= 1.0 / 0.7 + 1e-3


def test_a_dimension_that_keeps_failing_gets_buckets_not_mark_dynamic():
    # The same dimension failed three guards: automatic dynamic shapes did not hold for it.
    reasons = ["0/1: tensor 'args[0]' size mismatch at index 2. expected 64, actual 120",
               "0/0: tensor 'args[0]' size mismatch at index 2. expected 88, actual 120",
               "0/2: tensor 'args[0]' size mismatch at index 2. expected 120, actual 136"]
    f = run_rule("RECOMPILES", compiled_record(6, 0.6, reasons))
    assert f is not None and f.evidence["dynamic_did_not_hold"] is True
    assert "mark_dynamic" not in f.fix and "multiple of 32" in f.fix
    once = run_rule("RECOMPILES", compiled_record(6, 0.6, reasons[:1]))
    assert once.evidence["dynamic_did_not_hold"] is False and "mark_dynamic(args, 2)" in once.fix


def test_recompiles_silent_without_dynamo_or_with_a_single_late_compile():
    assert run_rule("RECOMPILES", compiled_record(None, 0.0, [])) is None
    assert run_rule("RECOMPILES", compiled_record(1, 0.5, ["0/0: tensor 'x' size mismatch at index 0"])) is None
    assert run_rule("RECOMPILES", healthy_record()) is None


@pytest.mark.slow  # a real dynamo compile: seconds on a loaded machine
def test_dynamo_counters_see_frames_and_reasons():
    @torch.compile(backend="eager", dynamic=False)
    def double(x):
        return x * 2

    before = read_compile_stats()
    for n in (2, 3, 4):
        double(torch.ones(n))
    after = read_compile_stats()
    assert after is not None
    assert after.frames - (before.frames if before else 0) >= 3
    assert any("size mismatch" in r for r in after.reasons)
