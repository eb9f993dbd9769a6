"""MEMORY_GROWTH, HOST_MEMORY_PRESSURE and the GPU-only rules, on synthetic records (no GPU needed)."""

from __future__ import annotations

import math

import pytest
from synth_records import (
    SCRIPT,
    healthy_config,
    healthy_loader,
    healthy_record,
    host_series,
    make_steps,
    run_rule,
    stack_profile,
    worker,
)

from stave.measure import CopyStat, ProbeResults, SyncSite

MB = 2**20


# --- MEMORY_GROWTH ---------------------------------------------------------------------------------


def rss_record(rss):
    rec = healthy_record()
    rec.host = host_series(rec.steps, rss_bytes=rss)
    return rec


def test_memory_growth_linear_leak_is_critical_when_memory_runs_out_soon():
    rec = rss_record(lambda i, step: 2_000 * MB + step * 8 * MB)
    f = run_rule("MEMORY_GROWTH", rec)
    assert f is not None
    assert f.evidence["bytes_per_step"] == pytest.approx(8 * MB, rel=0.02)
    assert f.severity == "critical" and f.est_speedup == 1.0
    assert "loss.item()" in f.fix


def test_memory_growth_quiet_on_plateau_noise_and_absence():
    # Warm-up growth that flattens (a cache filling up) is not a leak.
    assert run_rule("MEMORY_GROWTH", rss_record(lambda i, step: 2_000 * MB + 60 * MB * (1 - math.exp(-step / 4)))) is None
    # Allocator noise without a trend.
    assert run_rule("MEMORY_GROWTH", rss_record(lambda i, step: 2_000 * MB + (i * 37 % 11) * MB)) is None
    # Growth that halves its rate within the run: warm-up filling caches and arenas, not a leak.
    half = len(rec_steps := rss_record(None).steps) // 2
    slowing = rss_record(lambda i, step: 2_000 * MB + 10 * MB * min(step, half) + 5 * MB * max(0, step - half))
    assert len(rec_steps) * 7.5 * MB > 0.1 * 2_000 * MB  # large enough for every other test
    assert run_rule("MEMORY_GROWTH", slowing) is None
    # A steady 1 MiB/step, but only 2% of the process's RSS over the run: warm-up looks like that.
    assert run_rule("MEMORY_GROWTH", rss_record(lambda i, step: 2_000 * MB + step * MB)) is None
    # A small steady growth below the noise floor.
    assert run_rule("MEMORY_GROWTH", rss_record(lambda i, step: 2_000 * MB + step * 50_000)) is None
    assert run_rule("MEMORY_GROWTH", rss_record(None)) is None


def _token_steps_rss(rec, tokens, grows_at):
    """Per-step token counts and per-step RSS that grows 8 MB at the steps ``grows_at`` picks."""
    rss = 2_000 * MB
    seen: set[int] = set()
    for s, t in zip(rec.steps, tokens):
        s.tokens = t
        if grows_at(t, t in seen):
            rss += 8 * MB
        seen.add(t)
        s.rss_bytes = rss
    rec.host = host_series(rec.steps, rss_bytes=lambda i, step: rec.steps[min(step, len(rec.steps) - 1)].rss_bytes)
    return rec


def test_memory_growth_with_new_batch_shapes_only_is_a_cache_not_a_leak():
    # Variable-length batches: most steps a length never seen, a few repeating one. A cache grows
    # only at the new lengths; a leak grows at every step, repeated lengths included.
    n = len(rss_record(None).steps)
    tokens = [64 * (1 + i) if i % 5 else 64 for i in range(n)]
    cache = _token_steps_rss(rss_record(None), tokens, lambda t, seen: not seen)
    leak = _token_steps_rss(rss_record(None), tokens, lambda t, seen: True)
    assert run_rule("MEMORY_GROWTH", leak) is not None
    assert run_rule("MEMORY_GROWTH", cache) is None
    # Too few repeated lengths to tell: the line stands.
    few = _token_steps_rss(rss_record(None), [64 * (1 + i) for i in range(n)], lambda t, seen: not seen)
    assert run_rule("MEMORY_GROWTH", few) is not None


def test_memory_growth_at_compiling_steps_only_is_a_cache_not_a_leak():
    # torch.compile recompiling for new lengths, sometimes for a length seen before (dynamo's guards
    # fail on the order of shapes too): RSS grows at the steps that compiled. Those steps are not
    # the leak's evidence; the steps that compiled nothing and repeated a shape are.
    n = len(rss_record(None).steps)
    tokens = [64 * (1 + i % 6) for i in range(n)]
    compiles = {i for i in range(n) if i < 6 or i % 7 == 3}

    def run(grows_at_every_step: bool):
        rec = rss_record(None)
        rss = 2_000 * MB
        for i, (s, t) in enumerate(zip(rec.steps, tokens)):
            s.tokens = t
            s.compiled_frames = 2 if i in compiles else 0
            if grows_at_every_step or i in compiles:
                rss += 40 * MB
            s.rss_bytes = rss
        rec.host = host_series(rec.steps, rss_bytes=lambda i, step: rec.steps[min(step, n - 1)].rss_bytes)
        return rec

    # The repeated lengths alone would call it a leak: one in seven of them recompiled and grew.
    assert run_rule("MEMORY_GROWTH", run(grows_at_every_step=False)) is None
    assert run_rule("MEMORY_GROWTH", run(grows_at_every_step=True)) is not None


def test_memory_growth_jumps_at_some_repeated_shapes_are_the_allocator_not_a_leak():
    # Variable lengths, RSS growing at every new length, and also at two of every five steps that
    # repeat one (the allocator keeping freed blocks: RSS jumps whatever the shape). The steady
    # steps' mean is 0.4 of the fitted rate, their median 0: a cache. A leak grows at every step.
    n = len(rss_record(None).steps)
    tokens = [64 * (1 + i) if i % 3 else 64 for i in range(n)]
    repeats = iter(range(n))

    def allocator(t, seen):
        return not seen or next(repeats) % 5 in (1, 3)

    cache = _token_steps_rss(rss_record(None), tokens, allocator)
    assert run_rule("MEMORY_GROWTH", cache) is None
    leak = _token_steps_rss(rss_record(None), tokens, lambda t, seen: True)
    assert run_rule("MEMORY_GROWTH", leak) is not None


def test_memory_growth_on_gpu_allocated_memory():
    rec = healthy_record(config=healthy_config(device_type="cuda", device_total_memory_bytes=80 * 2**30))
    rec.host = host_series(rec.steps, cuda_allocated_bytes=lambda i, step: 10 * 2**30 + step * 8 * MB)
    f = run_rule("MEMORY_GROWTH", rec)
    assert f is not None and f.evidence["counter"] == "cuda_allocated_bytes"


# --- HOST_MEMORY_PRESSURE ------------------------------------------------------------------------


def test_swapping_with_psi_estimate():
    rec = healthy_record()
    rec.host = host_series(rec.steps, swap_in_bytes_per_s=8 * MB, psi_memory_some_pct=20.0)
    f = run_rule("HOST_MEMORY_PRESSURE", rec)
    assert f is not None
    assert f.est_speedup == pytest.approx(1 / 0.8, rel=0.01)


def test_swapping_without_psi_is_a_risk_warning_not_a_number():
    rec = healthy_record()
    rec.host = host_series(rec.steps, swap_out_bytes_per_s=8 * MB, psi_memory_some_pct=None)
    f = run_rule("HOST_MEMORY_PRESSURE", rec)
    assert f is not None and f.est_speedup == 1.0 and f.severity == "warning"


def test_memory_pressure_quiet_when_counters_absent_or_calm():
    assert run_rule("HOST_MEMORY_PRESSURE", healthy_record()) is None
    rec = healthy_record()
    rec.host = host_series(rec.steps, swap_in_bytes_per_s=None, swap_out_bytes_per_s=None, psi_memory_some_pct=None)
    assert run_rule("HOST_MEMORY_PRESSURE", rec) is None


def test_dataset_reread_from_disk_while_it_would_fit():
    steps = make_steps(lambda i: {"data_wait": 60.0, "forward": 18.0, "backward": 16.0, "optimizer": 3.0, "other": 3.0})
    loader = healthy_loader(dataset_bytes_on_disk=1 * 2**30, dataset_files=50_000)
    rec = healthy_record(
        steps=steps,
        config=healthy_config(loaders=[loader]),
        host=host_series(steps, disk_read_bytes_per_s=400 * MB, iowait_pct=30.0, cpu_system_pct=50.0),
        workers=[worker(i, 700, 4000.0, 300.0, run_delay_us=100.0) for i in range(2)],
    )
    f = run_rule("HOST_MEMORY_PRESSURE", rec)
    assert f is not None
    assert "fits in memory" in f.title
    # Too big for the page cache: no finding.
    rec.config.loaders[0].dataset_bytes_on_disk = 40 * 2**30
    assert run_rule("HOST_MEMORY_PRESSURE", rec) is None


# --- GPU rules ---------------------------------------------------------------------------------------


def gpu_record(phases=None, util=60.0, **cfg):
    steps = make_steps(phases or (lambda i: {"data_wait": 2.0, "h2d": 15.0, "forward": 30.0, "backward": 40.0,
                                             "optimizer": 5.0, "other": 8.0}))
    settings = {"device_type": "cuda", "device_name": "NVIDIA H100", "device_capability": [9, 0],
                "device_total_memory_bytes": 80 * 2**30, **cfg}
    config = healthy_config(**settings)
    rec = healthy_record(steps=steps, config=config, probes=ProbeResults(op_overhead_ns=30_000.0))
    rec.host = host_series(steps, gpu_util_pct=util)
    return rec


def copies(pinned: bool, non_blocking: bool):
    return [CopyStat("h2d", "float32", pinned, non_blocking, count=80, nbytes=80 * 1_572_864, host_ns=10 * 10**6)]


def test_h2d_pageable_and_blocking():
    rec = gpu_record()
    rec.copies = copies(pinned=False, non_blocking=False)
    f = run_rule("H2D_PAGEABLE", rec)
    assert f is not None and "pin_memory=True" in f.fix
    assert f.est_speedup == pytest.approx(0.1 / (0.1 - 0.0075), rel=0.01)
    b = run_rule("H2D_BLOCKING", rec)
    assert b is not None and "DeviceLoader" in b.fix
    assert b.est_speedup == pytest.approx(0.1 / 0.085, rel=0.01)


def test_h2d_pageable_is_priced_at_the_pinned_probes_ratio():
    # The probe measured pinned copies 8x faster than pageable ones on this machine's link (an H200
    # read 6 GB/s pageable): 7/8 of the 15 ms copy goes, not the assumed half.
    rec = gpu_record()
    rec.copies = copies(pinned=False, non_blocking=False)
    rec.probes = ProbeResults(op_overhead_ns=30_000.0, pinned_copy_speedup=8.0, pinned_copy_probe_bytes=1_572_864)
    f = run_rule("H2D_PAGEABLE", rec)
    assert f is not None
    assert f.est_speedup == pytest.approx(0.1 / (0.1 - 0.015 * 7 / 8), rel=0.01)
    assert f.evidence["pinned_copy_speedup"] == 8.0 and f.evidence["pinned_copy_speedup_source"] == "probe"
    assert "8.0x here" in f.explanation
    # A probe that found no gain (a link where staging costs nothing) prices none.
    rec.probes = ProbeResults(op_overhead_ns=30_000.0, pinned_copy_speedup=0.95)
    assert run_rule("H2D_PAGEABLE", rec) is None


def test_h2d_quiet_when_pinned_async_or_on_cpu():
    rec = gpu_record()
    rec.copies = copies(pinned=True, non_blocking=True)
    assert run_rule("H2D_PAGEABLE", rec) is None
    assert run_rule("H2D_BLOCKING", rec) is None
    cpu = healthy_record()
    cpu.copies = copies(pinned=False, non_blocking=False)
    assert run_rule("H2D_PAGEABLE", cpu) is None


def test_sync_in_loop_uses_host_wait_and_gpu_busy():
    rec = gpu_record(util=55.0)
    rec.syncs = [SyncSite(".item()", SCRIPT, 61, "train", calls=43, steps_with_call=43)]
    rec.stacks = stack_profile(rec.steps, {"other": [(61, 1.0)], "forward": [(50, 1.0)]}, interval_ms=2.0)
    f = run_rule("SYNC_IN_LOOP", rec)
    assert f is not None
    assert f.lines == [f"{SCRIPT}:61"]
    wait = f.evidence["host_wait_s_per_step"]
    assert wait == pytest.approx(0.008, rel=0.1)
    assert f.est_speedup == pytest.approx(0.1 / max(0.055, 0.1 - wait), rel=0.02)


def test_sync_in_loop_without_utilization_is_not_estimated_and_quiet_for_rare_syncs():
    rec = gpu_record(util=None)
    rec.syncs = [SyncSite(".item()", SCRIPT, 61, "train", calls=43, steps_with_call=43)]
    f = run_rule("SYNC_IN_LOOP", rec)
    assert f is not None and f.est_speedup == 1.0
    rec.syncs = [SyncSite(".item()", SCRIPT, 61, "train", calls=4, steps_with_call=4)]
    assert run_rule("SYNC_IN_LOOP", rec) is None


def test_empty_cache_in_loop():
    rec = gpu_record()
    rec.cuda_calls = {"empty_cache": 43}
    assert run_rule("EMPTY_CACHE_IN_LOOP", rec) is not None
    rec.cuda_calls = {"empty_cache": 1}
    assert run_rule("EMPTY_CACHE_IN_LOOP", rec) is None


def test_cudnn_and_determinism_are_information():
    f = run_rule("CUDNN_BENCHMARK_OFF", gpu_record(cudnn_benchmark=False))
    assert f is not None and f.severity == "info" and f.est_speedup == 1.0
    assert run_rule("CUDNN_BENCHMARK_OFF", gpu_record(cudnn_benchmark=True)) is None
    assert run_rule("CUDNN_BENCHMARK_OFF", gpu_record(cudnn_benchmark=None)) is None
    assert run_rule("CUDNN_BENCHMARK_OFF", healthy_record(config=healthy_config(cudnn_benchmark=False))) is None
    assert run_rule("DETERMINISTIC_ALGORITHMS", gpu_record(deterministic_algorithms=True)) is not None
    assert run_rule("DETERMINISTIC_ALGORITHMS", gpu_record(deterministic_algorithms=False)) is None


def test_no_compile_from_dispatch_cost():
    rec = gpu_record(util=60.0)
    f = run_rule("NO_COMPILE", rec)
    # 900 ops x 30 us = 27 ms of a 100 ms step; the GPU is busy 60 ms: T' = max(60, 73) ms.
    assert f is not None and f.est_speedup == pytest.approx(0.1 / 0.073, rel=0.01)
    assert run_rule("NO_COMPILE", gpu_record(util=None)) is None
    assert run_rule("NO_COMPILE", gpu_record(compiled=True)) is None
    assert run_rule("NO_COMPILE", gpu_record(device_capability=[6, 1])) is None


def test_dataparallel_on_cpu_is_info_pass_through():
    f = run_rule("DATAPARALLEL_USED", healthy_record(config=healthy_config(dataparallel=True)))
    assert f is not None and f.severity == "info" and f.est_speedup == 1.0
    assert "model.module" in f.fix
    g = run_rule("DATAPARALLEL_USED", gpu_record(dataparallel=True))
    assert g is not None and "DistributedDataParallel" in g.fix
    assert run_rule("DATAPARALLEL_USED", healthy_record()) is None


def test_gpu_underused_when_host_work_leaves_it_idle():
    rec = gpu_record(lambda i: {"data_wait": 1.0, "forward": 20.0, "backward": 25.0, "optimizer": 4.0, "other": 50.0},
                     util=30.0)
    f = run_rule("GPU_UNDERUSED", rec)
    assert f is not None and f.est_speedup == pytest.approx(0.1 / 0.05, rel=0.02)
    assert run_rule("GPU_UNDERUSED", gpu_record(util=90.0)) is None
    assert run_rule("GPU_UNDERUSED", gpu_record(util=None)) is None
    data = gpu_record(lambda i: {"data_wait": 50.0, "forward": 20.0, "backward": 25.0, "other": 5.0}, util=30.0)
    assert run_rule("GPU_UNDERUSED", data) is None


def test_gpu_rules_quiet_on_cpu_record():
    rec = healthy_record()
    for rule_id in ("H2D_PAGEABLE", "H2D_BLOCKING", "SYNC_IN_LOOP", "EMPTY_CACHE_IN_LOOP", "CUDNN_BENCHMARK_OFF",
                    "DETERMINISTIC_ALGORITHMS", "NO_COMPILE", "GPU_UNDERUSED"):
        assert run_rule(rule_id, rec) is None, rule_id
