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


def test_a_compiling_step_is_priced_by_its_excess_over_the_other_steps_rate():
    # Steps of 32 to 64 samples, 1 ms a sample; four of them compiled: 150 ms of their time beyond
    # that rate, of which dynamo's compile timer saw 100 ms (the rest: first runs of new kernels).
    from synth_records import make_steps

    steps = make_steps(lambda i: {"data_wait": 1.0, "forward": 20.0, "backward": 20.0, "optimizer": 5.0, "other": 2.0})
    for i, s in enumerate(steps):
        s.samples = 32 + (i * 7) % 33
        base_ns = s.samples * 1_000_000
        s.end_ns = s.start_ns + base_ns + (37_500_000 if i in (3, 9, 15, 21) and s.counted else 0)
        s.forward_ns = s.end_ns - s.start_ns - 28_000_000
        s.compiled_frames = 1 if i in (3, 9, 15, 21) and s.counted else 0
    rec = compiled_record(4, 0.100, ["0/0: tensor 'x' size mismatch at index 0. expected 40, actual 47"])
    rec.steps = steps
    f = run_rule("RECOMPILES", rec)
    assert f is not None
    assert f.evidence["compiling_steps"] == 4
    assert f.evidence["steady_s_per_sample"] == pytest.approx(1e-3)
    assert f.evidence["compiling_steps_excess_s"] == pytest.approx(0.150)
    counted = [s for s in steps if s.counted]
    assert f.evidence["saved_s_per_step"] == pytest.approx(0.150 / len(counted))
    # Without per-step compile counts (an older record), dynamo's timer alone: a smaller estimate.
    for s in steps:
        s.compiled_frames = 0
    g = run_rule("RECOMPILES", rec)
    assert g is not None and g.evidence["saved_s_per_step"] == pytest.approx(0.100 / len(counted))
    assert g.est_speedup < f.est_speedup


def test_the_bucketing_fix_keeps_one_compile_per_bucket():
    # Sizes 64 to 144 failing the guards again and again: the fix pads them to multiples of 32,
    # four buckets (64, 96, 128, 160), each still compiled once: 4 of the 13 frames' cost stays.
    from stave.diagnose.rules.compile import _buckets

    reasons = [f"0/{i}: tensor 'args[0]' size mismatch at index 2. expected {a}, actual {b}"
               for i, (a, b) in enumerate([(88, 64), (64, 120), (120, 136), (136, 144)])]
    assert _buckets(reasons, "args[0]", "2") == 4
    assert _buckets(reasons, "args[0]", "3") is None
    rec = compiled_record(12, 1.2, reasons)
    rec.config.compile_frames = 13
    f = run_rule("RECOMPILES", rec)
    assert f is not None and f.evidence["dynamic_did_not_hold"] and f.evidence["buckets_after_fix"] == 4
    counted = len([s for s in rec.steps if s.counted])
    assert f.evidence["saved_s_per_step"] == pytest.approx(1.2 * 9 / 13 / counted, rel=1e-3)  # evidence is rounded


def test_dynamic_false_without_convolutions_is_fixed_by_dropping_it():
    # The same repeated failures, but the model was compiled with dynamic=False and has no
    # convolutions: without the flag one dynamic graph serves every size, so no compile stays.
    reasons = [f"0/{i}: tensor 'args[0]' size mismatch at index 0. expected {a}, actual {b}"
               for i, (a, b) in enumerate([(88, 64), (64, 120), (120, 126), (126, 100)])]
    rec = compiled_record(12, 1.2, reasons)
    rec.config.compile_frames = 13
    rec.config.compile_dynamic = False
    rec.config.conv_model = False
    f = run_rule("RECOMPILES", rec)
    assert f is not None and f.evidence["buckets_after_fix"] is None
    assert "without dynamic=False" in f.fix and "mark_dynamic(x, 0)" in f.fix
    counted = len([s for s in rec.steps if s.counted])
    assert f.evidence["saved_s_per_step"] == pytest.approx(1.2 / counted, rel=1e-3)
    # A conv net: its compiled convolutions specialize on the size whatever the flag: buckets.
    rec.config.conv_model = True
    g = run_rule("RECOMPILES", rec)
    assert g is not None and g.evidence["buckets_after_fix"] == 3 and "multiple of 32" in g.fix
    assert g.est_speedup < f.est_speedup


def test_the_compile_flag_is_read_from_the_compiled_module():
    from stave.capture.config_probe import describe_model
    from stave.measure import ConfigSnapshot

    for flag in (False, True, None):
        snap = ConfigSnapshot()
        describe_model(torch.compile(torch.nn.Linear(2, 2), dynamic=flag), snap)
        assert snap.compiled and snap.compile_dynamic is flag
    snap = ConfigSnapshot()
    describe_model(torch.nn.Linear(2, 2), snap)
    assert snap.compile_dynamic is None
