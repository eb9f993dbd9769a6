"""The analyses the rules stand on: pipeline and host summaries, trends, outliers, what-if models."""

from __future__ import annotations

import pytest
from synth_records import SCRIPT, STEPS, healthy_loader, healthy_record, host_series, make_steps, stack_profile, worker

from stave.analyze.host import summarize_host
from stave.analyze.hotlines import hot_lines, seconds_at_lines
from stave.analyze.outliers import find_outliers
from stave.analyze.pipeline import main_loader, summarize_pipeline
from stave.analyze.trend import memory_trend
from stave.analyze.step_model import speedup


def test_pipeline_per_sample_costs_and_io_pattern():
    rec = healthy_record(workers=[worker(0, 100, 2000.0, 500.0, run_delay_us=250.0, opens=2.0, read_calls=5.0,
                                         read_chars=20_000.0)])
    pipe = summarize_pipeline(rec)
    assert pipe is not None
    assert pipe.wall_s_per_sample == pytest.approx(0.002)
    assert pipe.off_cpu_share == pytest.approx(0.75)
    assert pipe.run_delay_s_per_sample == pytest.approx(0.00025)
    assert pipe.opens_per_sample == pytest.approx(2.0)
    assert pipe.bytes_per_read_call == pytest.approx(4000.0)
    assert pipe.top_stage().name == "load"
    assert sum(s.share for s in pipe.stages) == pytest.approx(1.0)


def test_pipeline_one_hidden_counter_hides_the_total():
    rec = healthy_record(workers=[worker(0, 100, 2000.0, 500.0), worker(1, 100, 2000.0, 500.0, opens=None,
                                                                          run_delay_us=None)])
    pipe = summarize_pipeline(rec)
    assert pipe.opens_per_sample is None and pipe.run_delay_s_per_sample is None
    assert pipe.read_calls_per_sample == pytest.approx(3.0)


def test_pipeline_main_loader_is_the_busiest():
    rec = healthy_record()
    val = healthy_loader(loader_id=1, batches=3)
    rec.config.loaders.append(val)
    assert main_loader(rec).loader_id == 0
    rec.workers = []
    assert summarize_pipeline(rec) is None


def test_host_summary_keeps_absent_counters_absent_and_skips_warmup():
    rec = healthy_record()
    rec.host = host_series(rec.steps, iowait_pct=None, cpu_system_pct=lambda i, step: 100.0 if step < 3 else 40.0)
    host = summarize_host(rec)
    assert host.iowait_pct is None
    assert host.cpu_system_pct == pytest.approx(40.0)
    assert host.swap_active_share == 0.0


def test_memory_trend_slope_and_halves():
    rec = healthy_record()
    rec.host = host_series(rec.steps, rss_bytes=lambda i, step: 1_000_000 + 5_000 * step)
    trend = memory_trend(rec)
    assert trend.bytes_per_step == pytest.approx(5_000, rel=0.01)
    assert trend.r_squared > 0.95
    assert trend.second_half_bytes_per_step == pytest.approx(trend.first_half_bytes_per_step, rel=0.1)
    rec.host = host_series(rec.steps, rss_bytes=None)
    assert memory_trend(rec) is None


def test_outliers_period_and_phase():
    steps = make_steps(lambda i: {"forward": 40.0, "backward": 50.0, "other": 310.0 if i % 7 == 3 else 10.0})
    out = find_outliers(steps)
    assert out.period_steps == 7
    assert out.dominant_phase() == "other"
    assert out.excess_s == pytest.approx(len(out.indices) * 0.3, rel=0.01)
    assert find_outliers(make_steps()).indices == []


def test_hot_lines_shares_include_samples_without_user_frames():
    rec = healthy_record()
    prof = stack_profile(rec.steps, {"other": [(55, 0.5), (60, 0.5)]}, interval_ms=1.0)
    lines = hot_lines(prof, phase="other")
    assert {h.line for h in lines} == {55, 60}
    assert lines[0].label.startswith(SCRIPT)
    assert sum(h.share for h in lines) == pytest.approx(1.0, abs=0.05)
    assert seconds_at_lines(prof, {(SCRIPT, 55)}) == pytest.approx(STEPS * 0.002, rel=0.1)


def test_speedup_is_never_below_one():
    # The step model's overlap, CPU budget and batch cases: tests/unit/analyze/test_step_model.py.
    assert speedup(1.0, 0.5) == 2.0
    assert speedup(1.0, 2.0) == 1.0 and speedup(1.0, 0.0) == 1.0


def test_pipeline_steady_cost_leaves_out_each_workers_start_up():
    # Two workers, 100 samples each at 2 ms; each one's first batch (BATCH samples) also parsed an
    # index for 50 ms on first use. The steady per-sample cost stays 2 ms; the 100 ms is start-up.
    from synth_records import BATCH

    ws = [worker(0, 100, 2000.0, 2000.0), worker(1, 100, 2000.0, 2000.0)]
    for w in ws:
        w.getitem_wall_ns += 50_000_000
        w.getitem_cpu_ns += 50_000_000
        w.stages = [type(st)(st.name, st.samples, st.wall_ns + (50_000_000 if st.name == "load" else 0),
                             st.cpu_ns + (50_000_000 if st.name == "load" else 0)) for st in w.stages]
        w.first_batch_samples = BATCH
        w.first_batch_wall_ns = w.first_batch_cpu_ns = int(BATCH * 2_000_000 + 50_000_000)
    pipe = summarize_pipeline(healthy_record(workers=ws))
    assert pipe.wall_s_per_sample == pytest.approx(0.002, rel=1e-3)
    assert pipe.cpu_s_per_sample == pytest.approx(0.002, rel=1e-3)
    assert pipe.startup_wall_s == pytest.approx(0.1, rel=1e-3) and pipe.startup_cpu_s == pytest.approx(0.1, rel=1e-3)
    load = next(s for s in pipe.stages if s.name == "load")
    assert load.wall_s_per_sample == pytest.approx(0.0012, rel=1e-3)
    # Without a first batch kept apart (older records, or one batch per process) nothing moves.
    plain = summarize_pipeline(healthy_record(workers=[worker(0, 100, 2000.0, 500.0)]))
    assert plain.startup_wall_s == 0.0 and plain.wall_s_per_sample == pytest.approx(0.002)


def test_a_rhythm_must_be_unlikely_by_chance():
    from stave.analyze.outliers import period_steps

    # Stalls of a busy machine among 15 counted steps: gaps 1, 5, 5 once read as "every 5 steps".
    assert period_steps([7, 8, 13, 18], list(range(5, 20))) is None
    assert period_steps([12, 14, 15, 17], list(range(5, 20))) is None
    # A checkpoint every 10 steps, and one on every 8th step with a stray stall beside it.
    assert period_steps([9, 19, 29, 39], list(range(40))) == 10
    assert period_steps([3, 7, 15, 23, 31, 39], list(range(40))) == 8
    # Two stalls are never a rhythm.
    assert period_steps([9, 19], list(range(40))) is None
