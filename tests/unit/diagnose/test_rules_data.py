"""DATA_IO_BOUND, DATA_CPU_BOUND, DATA_WORKER_STARTUP and FORK_UNSAFE_HANDLE on synthetic records."""

from __future__ import annotations

import dataclasses
import math

import pytest
from synth_records import (
    BATCH,
    STEPS,
    healthy_config,
    healthy_loader,
    healthy_record,
    host_series,
    make_steps,
    run_all,
    run_rule,
    worker,
)

from stave.diagnose.rules import data

PER_WORKER = STEPS * BATCH // 2


def data_bound_steps(wait_ms: float = 60.0):
    return make_steps(lambda i: {"data_wait": wait_ms, "forward": 18.0, "backward": 16.0, "optimizer": 3.0, "other": 3.0})


def io_record(run_delay_us: float | None = 100.0, cpu_system_pct: float | None = 60.0, procs_running=2,
              wall_us: float = 4000.0, **worker_kw):
    """Two workers, 4 ms per sample (``wall_us``) of which 0.3 ms on-CPU: blocked on reads."""
    steps = data_bound_steps()
    kw = {"opens": 2.0, "read_calls": 4.0, "read_chars": 8192.0, **worker_kw}
    return healthy_record(
        steps=steps,
        host=host_series(steps, cpu_system_pct=cpu_system_pct, cpu_main_pct=60.0, procs_running=procs_running),
        workers=[worker(i, PER_WORKER, wall_us, 300.0, run_delay_us=run_delay_us, **kw) for i in range(2)],
    )


def test_io_bound_fires_with_more_workers_and_evidence():
    # 6.25 ms a sample: two workers deliver a batch of 32 every 100 ms, the measured step (60 ms
    # wait, 40 ms compute), so the step model explains the whole wait by the loader.
    f = run_rule("DATA_IO_BOUND", io_record(wall_us=6250.0))
    assert f is not None
    assert f.evidence["loading_blocked_share"] > 0.8
    assert f.evidence["opens_per_sample"] == pytest.approx(2.0)
    assert f.evidence["suggested_workers"] > 2
    assert f"num_workers={f.evidence['suggested_workers']}" in f.fix
    assert "stave pack" in f.fix
    # Hiding a 60% wait behind 40% compute: at most 100/40 = 2.5x, and more than the warning level.
    assert 1.5 < f.est_speedup <= 2.5 + 1e-6
    assert f.severity == "critical"
    assert run_rule("DATA_CPU_BOUND", io_record()) is None


def test_io_bound_names_the_workers_that_keep_up_bounded_by_memory_not_cores():
    # 12.5 ms a sample: 400 ms of blocked loading per batch against 40 ms of compute, so 10 workers
    # plus a spare keep up: more than 4 per core. Blocked workers use no CPU, so the cores do not
    # bound them; the memory does: the job holds 1 GB per process (3 GB over 3) and 24 GB are free.
    rec = io_record(wall_us=12500.0)
    rec.host = [dataclasses.replace(h, rss_bytes=3 * 2**30, mem_available_bytes=24 * 2**30) for h in rec.host]
    f = run_rule("DATA_IO_BOUND", rec)
    assert f is not None
    assert f.evidence["workers_limit"] == 2 + math.floor(24 * data.IO_WORKERS_MEMORY_SHARE)
    assert f.evidence["suggested_workers"] == math.ceil(400 / 40) + data.WORKER_SPARE
    assert f.evidence["suggested_workers"] > data.IO_WORKERS_PER_CORE * 2
    # Little free memory (2 GB, half of it for one more 1-GB worker): no more workers than it holds.
    rec.host = [dataclasses.replace(h, mem_available_bytes=2 * 2**30) for h in rec.host]
    assert run_rule("DATA_IO_BOUND", rec).evidence["suggested_workers"] == 3
    # Without memory counters the per-core fallback holds.
    rec.host = [dataclasses.replace(h, rss_bytes=None, mem_available_bytes=None) for h in rec.host]
    assert run_rule("DATA_IO_BOUND", rec).evidence["workers_limit"] == data.IO_WORKERS_PER_CORE * 2


def test_io_bound_not_claimed_when_off_cpu_time_is_queueing_for_a_core():
    # Off-CPU time that run_delay shows as waiting for a core is a CPU shortage, not I/O.
    rec = io_record(run_delay_us=3600.0, cpu_system_pct=99.0)
    assert run_rule("DATA_IO_BOUND", rec) is None
    # Its two workers already have a core each and compete with the compute for them: the CPU
    # shortage is CPU_CONTENTION's (one cause, one finding), not more or cheaper loading's.
    assert run_rule("DATA_CPU_BOUND", rec) is None
    cpu = run_rule("CPU_CONTENTION", rec)
    assert cpu is not None and cpu.evidence["num_workers"] == 2


def test_io_bound_without_run_delay_uses_the_run_queue_bound():
    # 8 runnable threads on 2 cores: a runnable worker waits at most 3x its 0.3 ms of CPU for a
    # core, so at least 4 - 0.3 - 0.9 = 2.8 ms of each 4 ms sample was blocked.
    f = run_rule("DATA_IO_BOUND", io_record(run_delay_us=None, cpu_system_pct=99.0, procs_running=8))
    assert f is not None
    assert f.evidence["waiting_for_core_is_upper_bound"] is True
    assert f.evidence["loading_blocked_share"] == pytest.approx(0.7, abs=0.01)
    # A worker mostly on-CPU on that machine: its off-CPU time may all be queueing.
    rec = io_record(run_delay_us=None, cpu_system_pct=99.0, procs_running=8)
    rec.workers = [worker(i, PER_WORKER, 4000.0, 1600.0, run_delay_us=None) for i in range(2)]
    assert run_rule("DATA_IO_BOUND", rec) is None
    assert run_rule("CPU_CONTENTION", rec) is not None


def test_io_bound_needs_a_scheduler_counter_or_an_idle_machine():
    # Neither run_delay nor the run queue: off-CPU counts as blocked only with idle cores.
    assert run_rule("DATA_IO_BOUND", io_record(run_delay_us=None, cpu_system_pct=50.0, procs_running=None)) is not None
    assert run_rule("DATA_IO_BOUND", io_record(run_delay_us=None, cpu_system_pct=98.0, procs_running=None)) is None
    no_host = io_record(run_delay_us=None, cpu_system_pct=None, procs_running=None)
    assert run_rule("DATA_IO_BOUND", no_host) is None


def test_io_bound_absent_io_counters_stay_absent():
    f = run_rule("DATA_IO_BOUND", io_record(opens=None, read_calls=None, read_chars=None))
    assert f is not None
    assert f.evidence["opens_per_sample"] is None
    assert f.evidence["bytes_per_read_call"] is None
    assert "file opens" not in f.title


def cpu_record(num_workers: int = 0, wall_us: float = 3000.0, cpu_us: float = 2900.0):
    """Loading 32 samples of 3 ms of CPU each in the main process: 96 ms against 34 ms of compute."""
    steps = make_steps(lambda i: {"data_wait": 96.0, "forward": 15.0, "backward": 15.0, "optimizer": 2.0, "other": 2.0})
    stages = {"load": (wall_us * 0.2, cpu_us * 0.2), "GaussianBlur": (wall_us * 0.6, cpu_us * 0.6),
              "ToTensor": (wall_us * 0.15, cpu_us * 0.15), "collate": (wall_us * 0.05, cpu_us * 0.05)}
    if num_workers == 0:
        workers = [worker(-1, STEPS * BATCH, wall_us, cpu_us, stages=stages)]
    else:
        workers = [worker(i, STEPS * BATCH // num_workers, wall_us, cpu_us, stages=stages) for i in range(num_workers)]
    loader = healthy_loader(num_workers=num_workers, persistent_workers=False,
                            prefetch_factor=None if num_workers == 0 else 2)
    return healthy_record(
        steps=steps,
        config=healthy_config(loaders=[loader]),
        host=host_series(steps, cpu_main_pct=100.0, cpu_system_pct=60.0),
        workers=workers,
    )


def test_cpu_bound_in_main_process_suggests_workers_and_names_top_stage():
    f = run_rule("DATA_CPU_BOUND", cpu_record())
    assert f is not None
    assert f.evidence["top_stage"] == "GaussianBlur"
    assert "GaussianBlur" in f.title
    assert f.evidence["suggested_workers"] == 2  # capped at the 2 usable cores
    assert "num_workers=2" in f.fix
    # Bounded by the cores: (compute CPU + loading CPU) / 2 cores, not by loading / 2 alone.
    t = 0.130
    assert f.est_speedup < t / (0.096 / 2)
    assert f.est_speedup > 1.5
    assert run_rule("DATA_IO_BOUND", cpu_record()) is None


def test_cpu_bound_estimate_counts_only_the_cores_other_processes_leave():
    quiet = run_rule("DATA_CPU_BOUND", cpu_record())
    busy_rec = cpu_record()
    # The machine is 100% busy while the job uses 1.3 cores: other processes hold 0.7 of the 2.
    busy_rec.host = host_series(busy_rec.steps, cpu_main_pct=100.0, cpu_workers_pct=30.0, cpu_system_pct=100.0)
    busy = run_rule("DATA_CPU_BOUND", busy_rec)
    assert busy.evidence["cores_available"] == pytest.approx(1.3)
    assert quiet.evidence["cores_available"] == pytest.approx(2.0)
    assert busy.est_speedup < quiet.est_speedup


def test_cpu_bound_still_reported_when_other_processes_hold_the_spare_core():
    rec = cpu_record()
    # The job uses 1.0 core of a 100%-busy 2-core machine: another process holds the other core, so
    # loading in workers cannot pay off now; the finding says so and estimates for the freed core.
    rec.host = host_series(rec.steps, cpu_main_pct=100.0, cpu_workers_pct=0.0, cpu_system_pct=100.0)
    f = run_rule("DATA_CPU_BOUND", rec)
    assert f is not None
    assert f.evidence["cores_available"] == pytest.approx(1.0)
    # The step model: the workers share the cores with the other process by fair share, so they
    # still win some of it, but less than on a quiet machine.
    assert 1.05 <= f.est_speedup < run_rule("DATA_CPU_BOUND", cpu_record()).est_speedup


def test_cpu_bound_with_all_cores_busy_estimates_a_cheaper_stage_as_an_upper_bound():
    f = run_rule("DATA_CPU_BOUND", cpu_record(num_workers=2))
    assert f is not None
    assert "suggested_workers" not in f.evidence
    assert "upper bound" in f.explanation
    assert "GaussianBlur" in f.fix


def test_no_data_findings_without_worker_accounts():
    rec = cpu_record()
    rec.workers = []
    assert run_rule("DATA_CPU_BOUND", rec) is None
    assert run_rule("DATA_IO_BOUND", rec) is None


def test_healthy_run_has_no_input_pipeline_finding():
    ids = {f.id for f in run_all(healthy_record())}
    assert not {i for i in ids if i.startswith("DATA_")}


def startup_record(persistent: bool = False, iterators: int = 8):
    """5 steps per epoch; the first step of each epoch waits 600 ms for fresh workers."""
    def phases(i: int):
        base = {"data_wait": 2.0, "forward": 20.0, "backward": 20.0, "optimizer": 3.0, "other": 2.0}
        if i % 5 == 0:
            base["data_wait"] = 600.0
        return base

    steps = make_steps(phases)
    loader = healthy_loader(persistent_workers=persistent, iterators_created=iterators,
                            first_batch_wait_ns=[600_000_000] * iterators, multiprocessing_context="spawn")
    return healthy_record(steps=steps, config=healthy_config(loaders=[loader]),
                          workers=[worker(i, PER_WORKER, 500.0, 450.0) for i in range(2)])


def test_worker_startup_fires_on_epoch_restarts():
    f = run_rule("DATA_WORKER_STARTUP", startup_record())
    assert f is not None
    assert "persistent_workers=True" in f.fix
    assert "'spawn'" in f.fix
    assert f.evidence["iterators_created"] == 8
    # Mean step 162 ms of which ~105 ms is start-up: more than 2x, less than the 3.6x of no wait at all.
    assert 2.0 < f.est_speedup < 3.6
    # The same stalls are not reported a second time as step outliers.
    assert run_rule("STEP_OUTLIERS", startup_record()) is None


def test_worker_startup_keeps_each_epochs_first_fetch():
    """Persistent workers start each epoch with an empty queue: the epoch's first batch still waits
    for one batch's fetch in a worker, so a slower per-sample fetch leaves more of the stall."""
    def record(wall_us: float):
        rec = startup_record()
        rec.workers = [worker(i, PER_WORKER, wall_us, wall_us * 0.9) for i in range(2)]
        return rec

    fast = run_rule("DATA_WORKER_STARTUP", record(50.0))
    slow = run_rule("DATA_WORKER_STARTUP", record(2000.0))
    assert fast is not None and slow is not None
    assert slow.evidence["first_batch_fetch_kept_s"] == pytest.approx(BATCH * 2000e-6, rel=0.05)
    assert fast.evidence["first_batch_fetch_kept_s"] == pytest.approx(BATCH * 50e-6, rel=0.05)
    assert slow.est_speedup < fast.est_speedup


@pytest.mark.parametrize("persistent,iterators", [(True, 8), (False, 1)])
def test_worker_startup_quiet_with_persistent_workers_or_one_epoch(persistent, iterators):
    assert run_rule("DATA_WORKER_STARTUP", startup_record(persistent, iterators)) is None


def test_fork_unsafe_handle_fires_critical_with_lazy_open_fix():
    loader = healthy_loader(fork_unsafe_handles=["dataset.h5 -> h5py.File"], dataset_type="H5Dataset")
    rec = healthy_record(config=healthy_config(loaders=[loader]))
    f = run_rule("FORK_UNSAFE_HANDLE", rec)
    assert f is not None
    assert f.severity == "critical" and f.est_speedup == 1.0
    assert "self.h5 = None" in f.fix and "h5py.File(self.path" in f.fix
    assert "class H5Dataset" in f.fix
    # Ranked as a critical risk: above speed findings below the warning level.
    assert run_all(rec)[0].id == "FORK_UNSAFE_HANDLE"


def test_fork_unsafe_handle_quiet_without_workers_or_handles():
    assert run_rule("FORK_UNSAFE_HANDLE", healthy_record()) is None
    loader = healthy_loader(num_workers=0, fork_unsafe_handles=["dataset.f -> open file (BufferedReader)"])
    assert run_rule("FORK_UNSAFE_HANDLE", healthy_record(config=healthy_config(loaders=[loader]))) is None


def test_dataloader_snippet_keeps_user_settings():
    from stave.diagnose.rules._helpers import dataloader_call

    loader = dataclasses.replace(healthy_loader(), pin_memory=True, drop_last=True, multiprocessing_context="spawn")
    text = dataloader_call(loader, num_workers=6)
    assert "batch_size=32" in text and "shuffle=True" in text and "num_workers=6" in text
    assert "pin_memory=True" in text and "drop_last=True" in text and "'spawn'" in text
    assert "persistent_workers" not in dataloader_call(healthy_loader(num_workers=0, persistent_workers=False))


def in_memory_record(wall_us: float = 12.0, opens: float | None = 0.0, batch_size: int | None = BATCH):
    """A TensorDataset in the main process: 12 µs of per-item Python a sample, no file opened."""
    per_step_ms = wall_us * BATCH / 1e3
    steps = make_steps(lambda i: {"data_wait": per_step_ms, "forward": 0.1, "backward": 0.12, "optimizer": 0.05,
                                  "other": 0.05})
    stages = {"load": (wall_us * 0.85, wall_us * 0.85), "collate": (wall_us * 0.15, wall_us * 0.15)}
    loader = dataclasses.replace(healthy_loader(num_workers=0, persistent_workers=False, prefetch_factor=None),
                                 batch_size=batch_size, dataset_type="TensorDataset")
    return healthy_record(
        steps=steps,
        config=healthy_config(loaders=[loader]),
        host=host_series(steps, cpu_main_pct=100.0, cpu_system_pct=50.0),
        workers=[worker(-1, STEPS * BATCH, wall_us, wall_us, stages=stages, opens=opens, read_calls=0.0,
                        read_chars=0.0)],
    )


def test_per_item_overhead_suggests_whole_batch_indexing_not_workers():
    f = run_rule("DATA_CPU_BOUND", in_memory_record())
    assert f is not None
    assert "BatchSampler(RandomSampler(dataset)" in f.fix and "batch_size=None" in f.fix
    assert "num_workers" not in f.fix and "suggested_workers" not in f.evidence
    # Upper bound: the loading gone, the step is its compute.
    assert 1.5 < f.est_speedup <= (0.384 + 0.32) / 0.32 + 1e-6


def test_whole_batch_indexing_in_workers_keeps_the_shipping_of_each_batch():
    # Two workers, 40 µs of per-item fetch and collate a sample (collate most of it), the step
    # waiting for them. Whole-batch indexing removes the per-item part, not the shared-memory block
    # each batch is shipped in: the delivery probe's worker time beyond the main process's.
    from synth_records import TensorInfo

    wall_us = 40.0
    steps = make_steps(lambda i: {"data_wait": 0.6, "forward": 0.1, "backward": 0.12, "optimizer": 0.05,
                                  "other": 0.05})
    stages = {"load": (wall_us * 0.1, wall_us * 0.1), "collate": (wall_us * 0.9, wall_us * 0.9)}
    loader = dataclasses.replace(healthy_loader(num_workers=2), batch_size=BATCH, dataset_type="TensorDataset")

    def rec(**probe_values):
        r = healthy_record(
            steps=steps,
            config=healthy_config(loaders=[loader], batch=[TensorInfo("batch[0]", "torch.float32", [BATCH, 2048], "cpu", BATCH * 2048 * 4)]),
            host=host_series(steps, cpu_main_pct=60.0, cpu_workers_pct=100.0, cpu_system_pct=80.0),
            workers=[worker(w, STEPS * BATCH // 2, wall_us, wall_us, stages=stages, opens=0.0, read_calls=0.0,
                            read_chars=0.0) for w in (0, 1)],
        )
        r.probes = dataclasses.replace(r.probes, **probe_values)
        return r

    bound = run_rule("DATA_CPU_BOUND", rec())
    assert bound is not None and "BatchSampler" in bound.fix
    # The probe: 1.28 ms a batch from a worker, 0.2 ms in the main process: 1.08 of the 1.28 ms
    # of loading a batch stays with the worker.
    shipped = run_rule("DATA_CPU_BOUND", rec(delivery_main_s=0.0002, delivery_worker_s=0.00128))
    assert shipped is not None and 1.0 < shipped.est_speedup < bound.est_speedup - 0.5
    assert shipped.evidence["worker_delivery_s_per_step"] == pytest.approx(0.00108)


def test_costly_or_file_backed_samples_still_get_workers():
    for rec in (in_memory_record(wall_us=200.0), in_memory_record(opens=1.0)):
        f = run_rule("DATA_CPU_BOUND", rec)
        assert f is not None and "BatchSampler" not in f.fix
        assert "num_workers=2" in f.fix


def test_cpu_bound_does_not_advise_workers_where_the_compute_already_uses_every_core():
    # Main-process loading of 96 ms beside 34 ms of compute that keeps both cores busy (the trainer
    # at 200% during compute, the machine saturated): workers would take their cores from the
    # compute, so the step model gives them little, far below the naive "hide the loading" 130/34.
    rec = cpu_record()
    rec.host = host_series(rec.steps, cpu_main_pct=190.0, cpu_workers_pct=0.0, cpu_system_pct=100.0)
    busy = run_rule("DATA_CPU_BOUND", rec)
    quiet = run_rule("DATA_CPU_BOUND", cpu_record())
    assert quiet is not None
    if busy is not None:
        assert busy.evidence["compute_threads"] > quiet.evidence["compute_threads"]
        assert busy.est_speedup < quiet.est_speedup
        assert busy.est_speedup < 0.130 / 0.034 / 2


def test_worker_startup_gives_back_the_compute_the_restarts_slow_too():
    """Forking fresh workers slows the training process's own phases in the epoch's first step too
    (the workers' start-up takes cores, the fork copy-on-write faults): the fix gives those back."""
    def phases(i: int, compute_ms: float):
        base = {"data_wait": 2.0, "forward": 20.0, "backward": 20.0, "optimizer": 3.0, "other": 2.0}
        if i % 5 == 0:
            base.update(data_wait=600.0, forward=compute_ms, backward=compute_ms)
        return base

    def record(compute_ms: float):
        loader = healthy_loader(persistent_workers=False, iterators_created=8, first_batch_wait_ns=[600_000_000] * 8)
        return healthy_record(steps=make_steps(lambda i: phases(i, compute_ms)), config=healthy_config(loaders=[loader]),
                              workers=[worker(i, PER_WORKER, 500.0, 450.0) for i in range(2)])

    quiet = run_rule("DATA_WORKER_STARTUP", record(20.0))
    slowed = run_rule("DATA_WORKER_STARTUP", record(120.0))
    assert quiet is not None and slowed is not None
    by_phase = slowed.evidence["restart_s_per_step_by_phase"]
    # Each epoch start costs 100 ms extra in forward and in backward, one step in five.
    assert by_phase["forward"] == pytest.approx(0.1 / 5, rel=0.1)
    assert by_phase["data_wait"] > by_phase["forward"]
    assert slowed.est_speedup > quiet.est_speedup


def test_loading_bound_keeps_the_data_wait_of_a_stalled_step():
    """With two workers every other step waits for a whole batch; a stall in forward that lands on
    such a step takes its forward excess out, not its wait (dropping the step dropped the wait)."""
    from stave.analyze.breakdown import summarize_steps
    from stave.analyze.host import summarize_host
    from stave.analyze.loading import loading_bound

    def phases(i: int):
        base = {"data_wait": 80.0 if i % 2 else 0.5, "forward": 2.0, "backward": 2.0, "optimizer": 0.5, "other": 0.5}
        if i % 6 == 1:
            base["forward"] = 40.0  # a stall, on a waiting step
        return base

    rec = healthy_record(steps=make_steps(phases), workers=[worker(i, PER_WORKER, 5000.0, 100.0) for i in range(2)])
    bound = loading_bound(rec, summarize_steps(rec.steps), summarize_host(rec))
    counted = rec.counted_steps()
    assert bound.steady_steps == len(counted)
    assert bound.data_wait_s == pytest.approx(sum(s.data_wait_ns for s in counted) / 1e9 / len(counted), rel=1e-6)
    # The step is the mean less the stalls' forward excess (38 ms on the stalled steps).
    stalled = sum(1 for s in counted if s.index % 6 == 1)
    mean = sum(s.duration_ns for s in counted) / 1e9 / len(counted)
    assert bound.step_s == pytest.approx(mean - stalled * 0.038 / len(counted), rel=0.02)


def test_the_datasets_own_getitem_gets_advice_for_images_and_for_arrays():
    # 'load' is whatever __getitem__ does outside its transforms: an image decode or per-sample
    # array math (a tabular dataset normalizing float64 rows), which its timing cannot tell apart.
    from stave.analyze.pipeline import StageCost

    advice = data._stage_advice(StageCost("load", 1e-3, 1e-3, 0.8))
    assert "decodes images" in advice and "ImageLoader" in advice
    assert "whole batch" in advice and "per sample" in advice
    assert "GaussianBlur" in data._stage_advice(StageCost("GaussianBlur", 1e-3, 1e-3, 0.6))


def test_io_bound_beside_busy_processes_is_judged_at_the_free_cores():
    """Beside a busy loop a 2-thread pool's compute waits at each op's barrier: 60 ms of compute
    against a 10 ms data wait hid the blocked reads (14 %). The busy-threads probe says the compute
    runs 3x faster at the free core; judged there the wait is a third of the step and DATA_IO_BOUND
    is named, as on a quiet machine. Without the probe, the run as measured: nothing."""
    from stave.measure import ProbeResults

    def busy(probe: list[int]):
        steps = make_steps(lambda i: {"data_wait": 10.0, "forward": 25.0, "backward": 25.0, "optimizer": 8.0,
                                      "other": 2.0})
        rec = healthy_record(
            steps=steps,
            host=host_series(steps, cpu_system_pct=100.0, cpu_main_pct=100.0, procs_running=3),
            workers=[worker(i, PER_WORKER, 2000.0, 300.0, run_delay_us=100.0, opens=1.0, read_calls=2.0,
                            read_chars=4096.0) for i in range(2)],
        )
        rec.config = dataclasses.replace(rec.config, cores_usable=2, cores_total=2, torch_threads=2)
        rec.run = dataclasses.replace(rec.run, cores_usable=2, cores_total=2)
        rec.probes = ProbeResults(op_overhead_ns=3000.0, busy_threads_speedup=3.0, busy_threads_elementwise_speedup=3.0,
                                  busy_threads_probe=probe)
        return rec

    assert run_rule("DATA_IO_BOUND", busy([])) is None
    f = run_rule("DATA_IO_BOUND", busy([2, 1]))
    assert f is not None and f.evidence["data_wait_share"] > 0.2 and f.est_speedup > 1.2
