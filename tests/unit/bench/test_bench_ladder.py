"""The ladder's decisions: rungs on top of kept ones, revert with a reason, the planted rung.

Timing is replaced by a deterministic speed model here (``compare`` is patched), so each test
checks the ladder's logic and the real loss check, not the machine's noise. The timed version of
the planted-rung test is in tests/integration/bench.
"""

from __future__ import annotations

import json
import math

import jsonschema
import pytest

import tiny_job
from stave.bench import compare as cmp
from stave.bench import ladder as L
from stave.bench import mfu as M
from stave.bench.compare import Comparison, TimingPlan
from stave.bench.ladder import LadderOptions, run_ladder
from stave.report.bench_json import load_schema, to_json
from stave.bench.rungs import Plan, Rung, plan_autocast, plan_batch_size, plan_channels_last, plan_uint8
from stave.bench.session import Window
from stave.bench.settings import RunConfig

# The rung plans tested here are the CPU ones (on a GPU the batch rung probes memory instead).
OPTIONS = LadderOptions(quick=True, device="cpu", timing=TimingPlan(warmup_steps=1, pairs=3, max_pairs=3, min_steps=1, min_s=0.0))


def patch_speed(monkeypatch: pytest.MonkeyPatch, speed) -> None:
    """Replace timing by ``speed(config) -> samples/s`` (a ±1% zig-zag keeps the interval honest)."""

    def fake_compare(a, b, plan, min_gain=None) -> Comparison:
        jitter = (1.0, 1.01, 0.99)
        wa = tuple(Window(1, int(speed(a.config) * 1000 * j), 1_000_000_000_000 // 1000, 0, None) for j in jitter)
        wb = tuple(Window(1, int(speed(b.config) * 1000 * j), 1_000_000_000_000 // 1000, 0, None) for j in jitter)
        return Comparison(wa, wb)

    monkeypatch.setattr(cmp, "compare", fake_compare)
    monkeypatch.setattr(M, "cpu_peak_flops", lambda dtype: 1e11)


def rung(name: str, plan) -> Rung:
    return Rung(name, name, plan)


def by_name(result, name: str):
    return next(r for r in result.rungs if r.name == name)


def test_planted_rung_dropping_normalization_is_reverted_while_bf16_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(L.dev, "cpu_has_native_bf16", lambda: True)
    # Both rungs would be faster: only the loss check can tell the planted one apart.
    patch_speed(
        monkeypatch, lambda c: 100.0 * (1.3 if c.uint8 else 1.0) * (2.0 if c.train.precision == "bf16" else 1.0)
    )
    result = run_ladder(tiny_job.planted_spec(), OPTIONS, [rung("uint8", plan_uint8), rung("autocast", plan_autocast)])
    planted, bf16 = by_name(result, "uint8"), by_name(result, "autocast")
    assert planted.status == "reverted" and planted.revert_kind == "loss"
    assert "inputs changed" in planted.reason and planted.trials[0].ratio == pytest.approx(1.3, rel=0.02)
    assert (
        bf16.status == "kept"
        and bf16.chosen.loss_passed
        and bf16.chosen.max_loss_dev < result.loss_check["tolerance"] * 10
    )
    assert result.final.train.precision == "bf16" and not result.final.uint8
    assert result.best_speedup == pytest.approx(2.0, rel=0.02)
    jsonschema.validate(json.loads(json.dumps(to_json(result))), load_schema())


def test_the_same_rung_with_correct_normalization_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    patch_speed(monkeypatch, lambda c: 100.0 * (1.3 if c.uint8 else 1.0))
    result = run_ladder(tiny_job.spec(), OPTIONS, [rung("uint8", plan_uint8)])
    assert by_name(result, "uint8").status == "kept"
    assert by_name(result, "uint8").chosen.max_loss_dev < 1e-4
    assert "mean = torch.tensor([0.49, 0.48, 0.45]" in result.code


def test_a_rung_inside_the_noise_is_reverted_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    patch_speed(monkeypatch, lambda c: 100.0 * (1.01 if c.uint8 else 1.0))
    result = run_ladder(tiny_job.spec(), OPTIONS, [rung("uint8", plan_uint8)])
    row = by_name(result, "uint8")
    assert row.status == "reverted" and row.revert_kind == "speed" and row.reason.startswith("no clear gain")
    assert result.final == result.baseline and "no rung helped" in result.code


def test_channels_last_retries_autocast_that_was_slower_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(L.dev, "cpu_has_native_bf16", lambda: True)

    def speed(c: RunConfig) -> float:
        bf16, cl = c.train.precision == "bf16", c.train.channels_last
        return 100.0 * (1.6 if bf16 and cl else 0.8 if bf16 else 1.0)

    patch_speed(monkeypatch, speed)
    result = run_ladder(
        tiny_job.spec(),
        OPTIONS,
        [rung("autocast", plan_autocast), Rung("channels_last", "channels_last", plan_channels_last, ("autocast",))],
    )
    assert by_name(result, "autocast").status == "reverted"
    cl = by_name(result, "channels_last")
    assert cl.status == "kept" and cl.chosen.label == "channels_last + autocast bf16"
    assert result.final.train.precision == "bf16" and result.final.train.channels_last
    assert result.chain_speedup == pytest.approx(1.6, rel=0.02)


def test_batch_size_grows_while_it_helps(monkeypatch: pytest.MonkeyPatch) -> None:
    patch_speed(monkeypatch, lambda c: 100.0 * min(c.batch_size, 128) / 64)
    result = run_ladder(tiny_job.spec(), OPTIONS, [rung("batch_size", plan_batch_size)])
    row = by_name(result, "batch_size")
    assert row.status == "kept" and result.final.batch_size == 128
    assert [t.config.batch_size for t in row.trials] == [128, 256] and not row.trials[1].accepted
    assert "scale the learning rate" in result.code


# The batch search without --quick's cap: batch 16 of the tiny job's 1024 samples grows to 32, 64, 128, 256.
FULL_SEARCH = LadderOptions(device="cpu", timing=OPTIONS.timing)


def batch_speed(rates: dict[int, float]):
    """A speed model from batch size to samples/s (the rest of the configuration does not matter)."""
    return lambda c: rates[c.batch_size]


def test_a_grow_search_looks_past_one_flat_step(monkeypatch: pytest.MonkeyPatch) -> None:
    # Batch 32 gains nothing, 64 gains 1.3x over the job's 16: one flat step must not end the search.
    patch_speed(monkeypatch, batch_speed({16: 100.0, 32: 100.5, 64: 130.0, 128: 130.5, 256: 200.0}))
    result = run_ladder(tiny_job.spec(batch_size=16), FULL_SEARCH, [rung("batch_size", plan_batch_size)])
    row = by_name(result, "batch_size")
    assert [t.config.batch_size for t in row.trials] == [32, 64, 128, 256]
    assert [t.accepted for t in row.trials] == [False, True, False, True]
    # 64 was timed against the job's 16 (the best so far), not against the flat 32.
    assert row.trials[1].ratio == pytest.approx(1.3, rel=0.02)
    assert row.status == "kept" and result.final.batch_size == 256
    assert row.chosen.x_baseline == pytest.approx(2.0, rel=0.02)


def test_a_grow_search_stops_after_two_non_gains_in_a_row(monkeypatch: pytest.MonkeyPatch) -> None:
    # 128 would be 2x, but two flat steps in a row (32, 64) end the search before it.
    patch_speed(monkeypatch, batch_speed({16: 100.0, 32: 100.5, 64: 99.0, 128: 200.0, 256: 200.0}))
    result = run_ladder(tiny_job.spec(batch_size=16), FULL_SEARCH, [rung("batch_size", plan_batch_size)])
    row = by_name(result, "batch_size")
    assert [t.config.batch_size for t in row.trials] == [32, 64]
    assert row.status == "reverted" and row.revert_kind == "speed" and result.final.batch_size == 16


def test_a_grow_search_counts_misses_from_the_last_gain(monkeypatch: pytest.MonkeyPatch) -> None:
    # kept, flat, kept, flat, flat: the miss count restarts after each gain.
    patch_speed(monkeypatch, batch_speed({16: 100.0, 32: 120.0, 64: 120.5, 128: 150.0, 256: 150.5}))
    result = run_ladder(tiny_job.spec(batch_size=16), FULL_SEARCH, [rung("batch_size", plan_batch_size)])
    row = by_name(result, "batch_size")
    assert [(t.config.batch_size, t.accepted) for t in row.trials] == [(32, True), (64, False), (128, True), (256, False)]
    assert result.final.batch_size == 128


def test_a_grow_search_stops_at_the_first_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    patch_speed(monkeypatch, batch_speed({16: 100.0, 32: 100.5, 64: 200.0}))

    def grow(ctx, current):
        return Plan("grow", (("batch 32", {"batch_size": 32}), ("broken", {"loader": "nowhere"}),
                             ("batch 64", {"batch_size": 64})))

    result = run_ladder(tiny_job.spec(batch_size=16), FULL_SEARCH, [rung("grow", grow)])
    row = by_name(result, "grow")
    assert [t.label for t in row.trials] == ["batch 32", "broken"] and row.trials[1].revert_kind == "error"
    assert result.final.batch_size == 16


def test_a_failing_candidate_is_reverted_and_the_climb_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    patch_speed(monkeypatch, lambda c: 100.0 * (1.5 if c.uint8 else 1.0))

    def broken(ctx, current):
        return Plan("single", (("broken", {"optimizer_impl": "fused", "precision": "fp32", "loader": "nowhere"}),))

    result = run_ladder(tiny_job.spec(), OPTIONS, [rung("broken", broken), rung("uint8", plan_uint8)])
    failed = by_name(result, "broken")
    assert failed.status == "reverted" and failed.revert_kind == "error"
    assert "no loader named 'nowhere'" in failed.reason
    assert by_name(result, "uint8").status == "kept"


def test_fed_ratio_and_mfu_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    patch_speed(monkeypatch, lambda c: 100.0)
    result = run_ladder(tiny_job.spec(), OPTIONS, [])
    assert result.fed_ratio == pytest.approx(1.0, rel=0.02)
    # Flop counter: the three linear layers and the conv dominate; forward + backward = 3x forward.
    conv = 2 * 8 * 3 * 9 * 16 * 16
    linear = 2 * (8 * 16 * 16 * 256 + 256 * 256 + 256 * 10)
    assert result.mfu["flops_per_sample"] == pytest.approx(3 * (conv + linear), rel=0.05)
    assert result.mfu["final"] == pytest.approx(
        result.mfu["flops_per_sample"] * result.final_samples_per_s / 1e11, rel=1e-6
    )
    assert not math.isnan(result.duration_s)


def test_ctrl_c_mid_climb_hands_over_the_rungs_measured_so_far(monkeypatch: pytest.MonkeyPatch) -> None:
    from stave.report.bench_table import summary_lines
    from stave.bench.result import LadderIncomplete

    patch_speed(monkeypatch, lambda c: 100.0 * (1.5 if c.uint8 else 1.0))

    def interrupted(ctx, current):
        raise KeyboardInterrupt

    with pytest.raises(LadderIncomplete) as stopped:
        run_ladder(tiny_job.spec(), OPTIONS, [rung("uint8", plan_uint8), rung("then", interrupted)])
    result = stopped.value.result
    assert isinstance(stopped.value.cause, KeyboardInterrupt)
    assert result.incomplete == "interrupted (Ctrl-C)"
    assert by_name(result, "uint8").status == "kept" and result.final.uint8
    assert result.chain_speedup == pytest.approx(1.5, rel=0.02)
    assert result.best_speedup is None and result.fed_ratio is None
    assert "mean = torch.tensor(" in result.code  # the kept uint8 rung, as code
    assert summary_lines(result)[0].startswith("INCOMPLETE (interrupted (Ctrl-C))")
    doc = json.loads(json.dumps(to_json(result)))
    jsonschema.validate(doc, load_schema())
    assert doc["best_speedup"] is None and doc["notes"] == ["incomplete: interrupted (Ctrl-C)"]


def test_a_failed_fed_comparison_keeps_the_measured_result(monkeypatch: pytest.MonkeyPatch) -> None:
    from stave.bench import final as F

    patch_speed(monkeypatch, lambda c: 100.0 * (1.5 if c.uint8 else 1.0))

    def worker_died(*args, **kwargs):
        raise RuntimeError("DataLoader worker (pid(s) 123) exited unexpectedly")

    monkeypatch.setattr(F, "_fed_comparison", worker_died)
    result = run_ladder(tiny_job.spec(), OPTIONS, [rung("uint8", plan_uint8)])
    assert result.incomplete is None and result.best_speedup == pytest.approx(1.5, rel=0.02)
    assert result.fed_ratio is None
    assert result.notes == ["the fed comparison failed: RuntimeError: DataLoader worker (pid(s) 123) exited unexpectedly"]
    jsonschema.validate(json.loads(json.dumps(to_json(result))), load_schema())
