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
