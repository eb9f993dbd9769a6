"""The sampler thread's life cycle, its failure handling and its own CPU cost."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from stave.monitor import Monitor


def _monitor_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "stave-monitor"]


def test_stop_is_idempotent_and_leaves_no_thread() -> None:
    monitor = Monitor(position=lambda: (0, "forward"), worker_pids=list)
    monitor.stop()  # before start: harmless
    monitor.start()
    assert monitor.running and len(_monitor_threads()) == 1
    time.sleep(0.15)
    monitor.stop()
    monitor.stop()
    assert not monitor.running
    assert _monitor_threads() == []
    assert monitor.host_samples() and monitor.stack_profile().samples
    with pytest.raises(RuntimeError):
        monitor.start()


def test_a_failing_position_callback_stops_the_monitor_and_says_why() -> None:
    def position() -> tuple[int, str]:
        raise KeyError("no step yet")

    monitor = Monitor(position=position, worker_pids=list)
    monitor.start()
    for _ in range(100):
        if not monitor.running:
            break
        time.sleep(0.01)
    monitor.stop()
    assert monitor.error is not None and "no step yet" in monitor.error
    assert _monitor_threads() == []


def test_bad_intervals_are_refused() -> None:
    with pytest.raises(ValueError, match="intervals"):
        Monitor(position=lambda: (0, ""), worker_pids=list, stack_interval_s=0)


def test_sampler_cpu_stays_a_small_share_of_wall_time() -> None:
    # A correctness guard against a tick that does far too much work (a process scan every tick,
    # re-opening files), not a benchmark: the measured share is ~1-2% on a loaded 2-core VM.
    monitor = Monitor(position=lambda: (0, "forward"), worker_pids=list)
    a = torch.ones(128, 128)
    monitor.start()
    start = time.perf_counter()
    while time.perf_counter() - start < 1.0:
        a = torch.mm(a, a).clamp_(0, 1)
    wall_s = time.perf_counter() - start
    monitor.stop()
    assert monitor.self_cpu_s > 0
    assert monitor.self_cpu_s < 0.10 * wall_s, f"sampler used {monitor.self_cpu_s:.3f} s CPU in {wall_s:.2f} s"


def test_stop_does_not_wait_for_a_long_interval() -> None:
    monitor = Monitor(position=lambda: (0, ""), worker_pids=list, host_interval_s=30.0, stacks=False)
    monitor.start()
    time.sleep(0.05)
    start = time.perf_counter()
    monitor.stop()
    assert time.perf_counter() - start < 2.0
    assert not monitor.running


def test_the_overhead_benchmark_runs_and_reports_each_pair() -> None:
    from benchmarks.monitor_overhead import measure

    result = measure("python", pairs=2, window_s=0.1, warmup_s=0.05)
    assert result.pairs == 2 and len(result.ratios) == 2
    assert all(r > 0 for r in result.ratios)
    assert result.min_ratio <= result.median_ratio <= result.max_ratio
    assert 0 < result.sampler_cpu_share < 1 and result.step_ms_plain > 0
    with pytest.raises(ValueError, match="unknown workload"):
        measure("nope")
