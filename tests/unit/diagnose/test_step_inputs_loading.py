"""What a fix that starts workers pays for a main-process loading that used the intra-op pool."""

from __future__ import annotations

import pytest
from synth_records import MS, healthy_config, healthy_loader, healthy_record, make_steps, worker

from stave.analyze.step_inputs import load_thread_factor
from stave.measure import ProbeResults


def _main_process_record(wait_cpu_share: float, spin_s: float | None):
    """20 ms data waits in the main process, the main thread's loading 20 ms of CPU per step."""
    steps = make_steps(lambda i: {"data_wait": 20.0, "forward": 2.0, "backward": 2.0, "optimizer": 0.5}, samples=32)
    for s in steps:
        s.data_wait_cpu_ns = int(20.0 * MS * wait_cpu_share)
    loader = healthy_loader(num_workers=0, persistent_workers=False, prefetch_factor=None, batch_size=32)
    probes = ProbeResults(op_overhead_ns=3000.0, pool_spin_s=spin_s)
    return healthy_record(steps=steps, probes=probes, config=healthy_config(loaders=[loader]),
                          workers=[worker(-1, 32 * len(steps), 625.0, 625.0)])


def test_the_pools_share_of_the_loading_moves_onto_the_workers_thread():
    # The process burned 1.8 cores in the wait; the other pool thread spun 5 ms of it after the
    # compute; the rest (36 - 5 ms) is the loading's, 1.55x what the main thread's clock read.
    rec = _main_process_record(1.8, 0.005)
    assert load_thread_factor(rec, 0.020, 2.0) == pytest.approx((36.0 - 5.0) / 20.0, rel=0.01)
    # Never more than the pool's threads, never less than the main thread's own CPU.
    assert load_thread_factor(_main_process_record(3.0, 0.0), 0.020, 2.0) == 2.0
    assert load_thread_factor(_main_process_record(1.0, 0.005), 0.020, 2.0) == 1.0


def test_an_unknown_spin_leaves_the_loading_as_the_main_thread_measured_it():
    # Without the spin probe all of the pool's CPU in the wait may be spin: nothing is added.
    assert load_thread_factor(_main_process_record(1.8, None), 0.020, 2.0) == 1.0
    assert load_thread_factor(_main_process_record(1.8, 0.005), 0.020, 1.0) == 1.0


def _waiting_record(forward_ms: float, wake_s: float | None):
    steps = make_steps(lambda i: {"data_wait": 68.0, "forward": forward_ms, "backward": 0.4, "optimizer": 0.3},
                       samples=32)
    loader = healthy_loader(num_workers=0, persistent_workers=False, prefetch_factor=None, batch_size=32)
    probes = ProbeResults(op_overhead_ns=3000.0, pool_wake_s=wake_s, pool_wake_min_wait_s=0.032)
    config = healthy_config(loaders=[loader])
    config.flops_by_phase = {"forward": 17_000_000, "backward": 17_000_000}
    return healthy_record(steps=steps, probes=probes, config=config,
                          workers=[worker(-1, 32 * len(steps), 2125.0, 50.0)])


def test_the_wake_credited_is_what_the_probe_and_the_runs_forward_both_show():
    from stave.analyze.breakdown import summarize_steps
    from stave.analyze.step_inputs import pool_wake_s

    # A forward of the backward's FLOPs taking 10.5 ms against the backward's 0.4 ms: 10.1 ms beyond
    # its arithmetic; the probe measured 11 ms: the run's 10.1 ms is credited.
    rec = _waiting_record(10.5, 0.011)
    assert pool_wake_s(rec, summarize_steps(rec.counted_steps())) == pytest.approx(0.0101, rel=0.02)
    # The probe's cost is the ceiling where the forward shows more.
    rec = _waiting_record(10.5, 0.004)
    assert pool_wake_s(rec, summarize_steps(rec.counted_steps())) == pytest.approx(0.004)
    # A forward in line with its FLOPs paid nothing, whatever the probe says; no probe, no credit.
    rec = _waiting_record(0.4, 0.011)
    assert pool_wake_s(rec, summarize_steps(rec.counted_steps())) == 0.0
    rec = _waiting_record(10.5, None)
    assert pool_wake_s(rec, summarize_steps(rec.counted_steps())) == 0.0


def test_a_stalled_fetch_of_a_main_process_loader_is_not_its_loading_cost():
    from stave.analyze.breakdown import summarize_steps
    from stave.analyze.loading import main_loading_kept_share, main_process_wait_stalls
    from stave.analyze.step_inputs import step_inputs

    # oversubscription.py --fixed under the doctor: 0.9 ms fetches, and one of 158 ms (the main
    # thread busy elsewhere for the whole of it), beside 3.7 ms of compute a step.
    def record(stall_ms: float):
        def phases(i: int) -> dict[str, float]:
            return {"data_wait": stall_ms if i == 12 else 0.9, "forward": 1.2, "backward": 1.8, "optimizer": 0.5}

        steps = make_steps(phases, samples=128)
        total_us = sum(phases(s.index)["data_wait"] for s in steps) * 1e3
        loader = healthy_loader(num_workers=0, persistent_workers=False, prefetch_factor=None, batch_size=128)
        per_sample = total_us / (128 * len(steps))
        return healthy_record(steps=steps, probes=ProbeResults(op_overhead_ns=900.0),
                              config=healthy_config(loaders=[loader]),
                              workers=[worker(-1, 128 * len(steps), per_sample, per_sample)])

    rec = record(158.0)
    assert 12 in {s.index for s in rec.counted_steps()}
    assert main_process_wait_stalls(rec) == {12: pytest.approx(0.1571, rel=1e-3)}
    counted_wait = sum(s.data_wait_ns for s in rec.counted_steps()) / 1e9
    kept = main_loading_kept_share(rec)
    assert kept == pytest.approx((counted_wait - 0.1571) / counted_wait, rel=1e-3)
    model = step_inputs(rec, summarize_steps(rec.counted_steps()))
    stalled_mean_wait = counted_wait / len(rec.counted_steps())
    assert model.phases_s["data_wait"] == pytest.approx(stalled_mean_wait * kept, rel=1e-3)
    # Without the stall the loader keeps every wait and its whole per-sample cost.
    steady = record(0.9)
    assert main_process_wait_stalls(steady) == {} and main_loading_kept_share(steady) == 1.0


def test_data_cpu_bound_prices_workers_between_the_thread_factors_bounds():
    import math

    from synth_records import run_rule

    from stave.analyze.breakdown import summarize_steps
    from stave.analyze.step_inputs import step_inputs
    from stave.analyze.step_model import estimate

    # 20 ms of main-process loading per 24.5 ms step, the process burning 1.8 cores in the waits:
    # a worker's one thread may cost up to 1.55x the loading's clock. Each worker count is priced at
    # that bound and at 1, the finding at the geometric mean of the two for the fastest count.
    rec = _main_process_record(1.8, 0.005)
    model = step_inputs(rec, summarize_steps(rec.counted_steps()))
    assert model is not None and model.load_thread_factor == pytest.approx(1.55, rel=0.02)
    f = run_rule("DATA_CPU_BOUND", rec)
    assert f is not None
    priced = f.evidence["workers_priced"]
    assert set(priced) == {"1", "2"} and all(len(b) == 2 and b[0] <= b[1] for b in priced.values())
    best = str(f.evidence["suggested_workers"])
    assert f.est_speedup == pytest.approx(math.sqrt(priced[best][0] * priced[best][1]), abs=2e-3)
    assert f.est_speedup == pytest.approx(max(math.sqrt(a * b) for a, b in priced.values()), abs=2e-3)
    step_s = summarize_steps(rec.counted_steps()).step_time_mean_s
    upper = estimate(model, model.changed(workers=int(best), load_thread_factor=1.0), step_s)
    assert priced[best][1] == pytest.approx(upper, abs=1e-3)
    # Without the factor (no spin probe) each count is one price.
    g = run_rule("DATA_CPU_BOUND", _main_process_record(1.8, None))
    assert g is not None and all(len(b) == 1 for b in g.evidence["workers_priced"].values())
