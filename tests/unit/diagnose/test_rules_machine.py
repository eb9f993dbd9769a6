"""CPU_CONTENTION, THREAD_OVERSUBSCRIPTION's boundary with it, and MACHINE_BUSY, on synthetic records."""

from __future__ import annotations

import dataclasses
import io

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

from stave.analyze.breakdown import summarize_steps
from stave.analyze.step_inputs import step_inputs
from stave.analyze.step_model import estimate
from stave.diagnose.rules.threads import _contention_fixes
from stave.measure import ProbeResults


def contention_record(num_workers: int = 6, worker_cpu_us: float = 2500.0, cpu_system_pct: float = 100.0,
                      torch_threads: int = 2, cores: int = 2, neighbour_stretch: float | None = 2.5):
    """A CPU job on `cores` cores: 2 busy compute threads and workers running a heavy per-sample
    transform (2.5 ms CPU a sample, 80 ms a step of 32: 0.8 core), data wait small (3 ms of 100).
    The neighbour probe read 2.5 (2 threads beside a busy process on 2 cores; fair sharing says 1.5):
    a parallel op pays k = 3 per thread beyond the cores, within the 1.8-5.5 measured on 2 cores."""
    steps = make_steps(lambda i: {"data_wait": 3.0, "forward": 40.0, "backward": 50.0, "optimizer": 5.0, "other": 2.0})
    per = STEPS * BATCH // num_workers
    stages = {"load": (worker_cpu_us * 0.1, worker_cpu_us * 0.1), "GaussianBlur": (worker_cpu_us * 0.7, worker_cpu_us * 0.7),
              "Normalize": (worker_cpu_us * 0.15, worker_cpu_us * 0.15), "collate": (worker_cpu_us * 0.05, worker_cpu_us * 0.05)}
    rec = healthy_record(
        steps=steps,
        config=healthy_config(torch_threads=torch_threads, cores_usable=cores, cores_total=cores,
                              loaders=[healthy_loader(num_workers=num_workers)]),
        workers=[worker(i, per, worker_cpu_us, worker_cpu_us, stages=stages) for i in range(num_workers)],
        host=host_series(steps, cpu_main_pct=130.0, cpu_workers_pct=70.0, cpu_system_pct=cpu_system_pct),
    )
    rec.run = dataclasses.replace(rec.run, cores_usable=cores, cores_total=cores)
    rec.probes = dataclasses.replace(rec.probes, neighbour_stretch=neighbour_stretch,
                                     neighbour_probe=[torch_threads, cores])
    return rec


def test_cpu_contention_fires_with_a_small_data_wait_and_names_the_fastest_split():
    rec = contention_record()
    f = run_rule("CPU_CONTENTION", rec)
    assert f is not None
    assert f.evidence["data_wait_share"] < 0.05
    assert f.evidence["loader_cores"] > 0.5
    priced = f.evidence["fixes_priced"]
    best = max(priced, key=priced.get)
    assert best in f.title and f.est_speedup == max(priced.values())
    # A parallel op that pays three times the fair share: one thread fewer wins.
    assert "threads 2 -> 1" in best and f.est_speedup > 1.2
    assert "compute_threads" in f.evidence["model_inputs_changed"]
    # The blur moved to the batch keeps its CPU (now on the step's threads): it gains only the
    # barrier penalty the workers' share cost the compute, less than the split that frees a core.
    batch = next(v for name, v in priced.items() if "batch-level" in name)
    assert 1.0 <= batch < f.est_speedup
    assert run_rule("THREAD_OVERSUBSCRIPTION", rec) is None  # one cause, one finding


def test_a_batch_level_transform_is_priced_between_its_bounds():
    # Fair sharing (k = 1): moving the blur from the workers into the step with its CPU-seconds
    # (the same arithmetic, now on the step's threads) gains nothing on saturated cores; moving it
    # as free (vectorized kernels costing nothing beside numpy's per-sample calls) gains 1.2x and
    # more. The run cannot tell which: the split's price is the geometric mean of the two.
    rec = contention_record(neighbour_stretch=None)
    summary = summarize_steps(rec.steps)
    model = step_inputs(rec, summary)
    fixes = _contention_fixes(model, 0.7)
    lower, upper = next(v for name, v in fixes.items() if "batch-level" in name)
    assert lower.load_cpu_s == upper.load_cpu_s == pytest.approx(model.load_cpu_s * 0.3)
    assert lower.moved_compute_cpu_s == pytest.approx(model.load_cpu_s * 0.7) and upper.moved_compute_cpu_s == 0.0
    lo = estimate(model, lower, summary.step_time_mean_s)
    hi = estimate(model, upper, summary.step_time_mean_s)
    assert lo < 1.05 < 1.2 < hi
    f = run_rule("CPU_CONTENTION", rec)
    assert f is not None
    name = next(n for n in f.evidence["fixes_priced"] if "batch-level" in n)
    assert f.evidence["fix_bounds"][name] == pytest.approx([lo, hi], rel=1e-3)
    bounds = f.evidence["fix_bounds"][name]
    assert f.evidence["fixes_priced"][name] == pytest.approx((bounds[0] * bounds[1]) ** 0.5, abs=1e-3)
    # The other splits are single prices, not bounds.
    assert set(f.evidence["fix_bounds"]) == {name}


def test_data_wait_of_contending_workers_is_cpu_contention_not_data_cpu_bound():
    # The same job, its data wait 12 % of the step: more workers cannot help (one per core and
    # more), so both rules would advise cheaper loading for the same cause. Only one speaks.
    steps = make_steps(lambda i: {"data_wait": 14.0, "forward": 40.0, "backward": 50.0, "optimizer": 5.0, "other": 2.0})
    rec = contention_record()
    rec.steps = steps
    rec.host = host_series(steps, cpu_main_pct=130.0, cpu_workers_pct=70.0, cpu_system_pct=100.0)
    assert run_rule("CPU_CONTENTION", rec) is not None
    assert run_rule("DATA_CPU_BOUND", rec) is None


def inline_record(opens: float, read_calls: float):
    """contention_record's job, its dataset computing each sample inline in __getitem__: no separate
    transform stages, only 'load' and 'collate'."""
    rec = contention_record()
    stages = {"load": (2400.0, 2400.0), "collate": (100.0, 100.0)}
    per = STEPS * BATCH // 6
    rec.workers = [worker(i, per, 2500.0, 2500.0, stages=stages, opens=opens, read_calls=read_calls)
                   for i in range(6)]
    return rec


def test_cpu_contention_prices_inline_sample_math_as_a_batch_level_transform():
    # Nothing read from storage: the 'load' stage is the sample's own computation (augmentation),
    # priced as moved to the batch.
    f = run_rule("CPU_CONTENTION", inline_record(opens=0.0, read_calls=0.01))
    assert f is not None
    inline = [name for name in f.evidence["fixes_priced"] if "__getitem__" in name]
    assert inline and f.evidence["fixes_priced"][inline[0]] > 1.05
    # A sample read from a file per call: 'load' is reading and decoding, not batchable.
    g = run_rule("CPU_CONTENTION", inline_record(opens=1.0, read_calls=3.0))
    assert g is None or not any("__getitem__" in name for name in g.evidence["fixes_priced"])


def test_inline_sample_math_named_when_moving_it_wins():
    # A lighter inline augmentation (1.2 ms a sample: 0.4 core): a thread fewer costs the compute
    # more than the contention does, and so does a worker fewer; moving the math to the batch, even
    # with all its CPU kept, frees the compute of the barrier penalty (k = 3), so it is the split
    # named, in the dataset's words.
    cpu_us = 1200.0
    rec = contention_record(worker_cpu_us=cpu_us)
    stages = {"load": (cpu_us * 0.96, cpu_us * 0.96), "collate": (cpu_us * 0.04, cpu_us * 0.04)}
    per = STEPS * BATCH // 6
    rec.workers = [worker(i, per, cpu_us, cpu_us, stages=stages, opens=0.0, read_calls=0.01) for i in range(6)]
    f = run_rule("CPU_CONTENTION", rec)
    assert f is not None
    assert "__getitem__" in f.title and "reads nothing from storage" in f.fix
    assert f.evidence["model_inputs_changed"]["moved_compute_cpu_s"][1] > 0
    # Even its lower bound (the math's CPU kept) wins; the estimate sits between the bounds.
    lo, hi = next(b for name, b in f.evidence["fix_bounds"].items() if "__getitem__" in name)
    assert 1.1 < lo < f.est_speedup < hi


def test_cpu_contention_silent_when_the_cores_had_room_or_the_loader_is_light():
    assert run_rule("CPU_CONTENTION", contention_record(cpu_system_pct=60.0)) is None
    assert run_rule("CPU_CONTENTION", contention_record(worker_cpu_us=20.0)) is None
    assert run_rule("CPU_CONTENTION", contention_record(cores=8)) is None
    assert run_rule("CPU_CONTENTION", healthy_record()) is None


def test_thread_pools_alone_over_the_cores_are_oversubscription_not_contention():
    rec = contention_record(torch_threads=8)
    rec.probes = ProbeResults(threads_speedup=1.8, op_overhead_ns=3000.0)
    assert run_rule("CPU_CONTENTION", rec) is None
    f = run_rule("THREAD_OVERSUBSCRIPTION", rec)
    assert f is not None and f.est_speedup > 1.1


def busy_record(other_cores: float):
    """The healthy job (1.8 + 0.3 cores of its own on 2) beside processes holding `other_cores`."""
    rec = healthy_record()
    own = 1.8 + 0.3
    system = min(100.0, (own + other_cores) / 4 * 100.0)
    rec.config = dataclasses.replace(rec.config, cores_usable=4, cores_total=4)
    rec.run = dataclasses.replace(rec.run, cores_usable=4, cores_total=4)
    rec.host = host_series(rec.steps, cpu_system_pct=system)
    return rec


def test_machine_busy_fires_first_and_marks_the_timing_findings_less_certain():
    rec = busy_record(other_cores=1.9)
    rec.config = dataclasses.replace(rec.config, torch_threads=8)
    rec.probes = ProbeResults(threads_speedup=2.0, op_overhead_ns=3000.0)
    found = run_all(rec)
    assert found[0].id == "MACHINE_BUSY"
    assert found[0].evidence["other_processes_cores"] > 1.5
    timing = [f for f in found[1:] if f.est_speedup > 1.0]
    assert timing and all(not f.certain for f in timing)
    assert found[0].certain
    assert found[0].to_dict()["certain"] is True and timing[0].to_dict()["certain"] is False


def test_machine_busy_silent_on_a_quiet_machine_and_with_others_on_cores_the_job_may_not_use():
    assert run_rule("MACHINE_BUSY", busy_record(other_cores=0.1)) is None
    assert all(f.certain for f in run_all(healthy_record()))
    # 2 of 4 cores are the job's (affinity); another process keeps the other 2 busy: not the job's cores.
    rec = busy_record(other_cores=1.9)
    rec.config = dataclasses.replace(rec.config, cores_usable=2)
    rec.run = dataclasses.replace(rec.run, cores_usable=2)
    assert run_rule("MACHINE_BUSY", rec) is None


def test_machine_busy_needs_three_sampler_windows():
    """A run of a few fast steps has one or two sampler windows, at its edges (the script's start,
    the doctor's post-run probes in a child process): they say nothing about other processes."""
    for kept, fires in ((1, False), (2, False), (3, True)):
        rec = busy_record(other_cores=1.9)
        counted = [h for h in rec.host if h.step in {s.index for s in rec.counted_steps()}]
        rec.host = counted[:kept]
        assert (run_rule("MACHINE_BUSY", rec) is not None) is fires, kept


def test_cpu_steal_on_a_vm_is_a_busy_machine_and_named_as_the_hypervisors():
    # Nothing else runs on the VM (the machine's busy CPU is the job's own) but the hypervisor ran
    # other guests on 1.6 of its 4 cores: the job got fewer cores, the way a busy neighbour takes them.
    rec = busy_record(other_cores=0.0)
    assert run_rule("MACHINE_BUSY", rec) is None
    rec.host = [dataclasses.replace(h, cpu_steal_pct=40.0) for h in rec.host]
    f = run_rule("MACHINE_BUSY", rec)
    assert f is not None and "hypervisor" in f.title and "steal" in f.title
    assert f.evidence["steal_cores"] == pytest.approx(1.6) and f.evidence["other_processes_cores"] > 1.4
    assert "taskset" not in f.fix
    # A little steal (a VM's usual 1%) beside a busy process: the process is what is named.
    rec = busy_record(other_cores=1.9)
    rec.host = [dataclasses.replace(h, cpu_steal_pct=1.0) for h in rec.host]
    g = run_rule("MACHINE_BUSY", rec)
    assert g is not None and "Other processes" in g.title and "taskset" in g.fix


def test_machine_busy_prices_the_job_at_the_threads_it_would_run_alone():
    # Two torch threads on 2 cores, but a burst of steal left the trainer one core's worth (100 %
    # main process, 0.7 cores stolen, the machine 50 % busy): the measured busy threads are what the
    # hypervisor left it. Alone, both threads run: giving the cores back is priced above fair share.
    from stave.analyze.breakdown import summarize_steps
    from stave.analyze.step_inputs import step_inputs
    from stave.analyze.step_model import estimate

    rec = healthy_record(workers=[])
    rec.config = dataclasses.replace(rec.config, cores_usable=2, cores_total=2, torch_threads=2)
    rec.run = dataclasses.replace(rec.run, cores_usable=2, cores_total=2)
    rec.host = host_series(rec.steps, cpu_main_pct=100.0, cpu_workers_pct=None, workers_alive=0,
                           cpu_system_pct=50.0, cpu_steal_pct=35.0)
    f = run_rule("MACHINE_BUSY", rec)
    assert f is not None and "hypervisor" in f.title
    summary = summarize_steps(rec.steps)
    model = step_inputs(rec, summary)
    assert model.compute_threads < 1.5  # what was measured
    measured = estimate(model, model.changed(other_cores=0.0), summary.step_time_mean_s)
    assert f.est_speedup > measured and f.est_speedup > 1.2


def test_the_jobs_other_ranks_on_the_node_are_not_a_busy_machine():
    # A second rank of the same torchrun job holds 1.9 cores: the job, not another job.
    rec = busy_record(other_cores=1.9)
    rec.host = [dataclasses.replace(s, cpu_job_ranks_pct=190.0) for s in rec.host]
    assert run_rule("MACHINE_BUSY", rec) is None
    # Another job beside the two ranks is still said, with only its own cores counted.
    rec = busy_record(other_cores=1.9)
    rec.host = [dataclasses.replace(s, cpu_job_ranks_pct=100.0) for s in rec.host]
    f = run_rule("MACHINE_BUSY", rec)
    assert f is not None and 0.8 < f.evidence["other_processes_cores"] < 1.0
    assert f.evidence["job_ranks_cores"] == 1.0


def test_batch_dtype_float64_is_priced_in_the_loading_for_a_float32_model():
    # Workers normalize in float64 (Normalize is most of the loading) beside two compute threads.
    rec = contention_record(num_workers=2)
    rec.config = dataclasses.replace(rec.config, batch=[
        dataclasses.replace(rec.config.batch[0], dtype="float64", nbytes=rec.config.batch[0].nbytes * 2)])
    f = run_rule("BATCH_DTYPE", rec)
    assert f is not None
    assert 0 < f.evidence["float_stage_share_of_loading"] < 0.5  # Normalize + collate, not the blur
    assert f.evidence["load_cpu_s_per_step_after"] < f.evidence["load_cpu_s_per_step"]
    assert f.est_speedup > 1.0
    # The same batch on a quiet machine with cheap loading: little to win, an honest small number.
    quiet = healthy_record(config=dataclasses.replace(rec.config, torch_threads=1))
    g = run_rule("BATCH_DTYPE", quiet)
    assert g is not None and g.est_speedup < f.est_speedup


def test_an_uncertain_finding_says_so_in_the_terminal_and_html_views():
    from rich.console import Console

    from stave.report.findings_view import UNCERTAIN_NOTE, findings_html, findings_renderable

    found = run_all(busy_record(other_cores=1.9))
    uncertain = [f for f in found if not f.certain]
    if not uncertain:  # the baseline job has no timing finding of its own: make one uncertain
        uncertain = [dataclasses.replace(found[0], certain=False)]
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(findings_renderable(uncertain))
    assert UNCERTAIN_NOTE in console.export_text()
    assert "less certain" in findings_html(uncertain)


def _with_step_cpu(rec, compute_cores: float):
    """The record's steps carrying the trainer's CPU: ``compute_cores`` cores over each step's
    compute time, none over its data wait."""
    for s in rec.steps:
        s.cpu_ns = int(compute_cores * (s.duration_ns - s.data_wait_ns))
        s.data_wait_cpu_ns = 0
    return rec


def test_cpu_contention_believes_the_trainers_cpu_over_the_workers_runnable_time():
    # The workers want 0.8 core beside 2 compute threads on 2 cores. When the trainer's own CPU
    # says its threads kept 1.97 of their 2 cores while computing, the workers took little from the
    # compute, and one thread or worker fewer only slows the job: no finding.
    kept = _with_step_cpu(contention_record(), 1.97)
    f = run_rule("CPU_CONTENTION", kept)
    assert f is None
    # When the threads had 1.5 of their cores, the contention the model describes is measured.
    lost = _with_step_cpu(contention_record(), 1.5)
    g = run_rule("CPU_CONTENTION", lost)
    assert g is not None and g.est_speedup >= 1.05


def test_irregular_stalls_on_a_busy_machine_are_the_machines():
    # Stalls in code outside the model at no rhythm: the job's on a quiet machine (a stray flush),
    # the machine's when other processes held its cores (a preempted thread stalls any phase).
    def phases(i: int):
        return {"forward": 40.0, "backward": 50.0, "other": 300.0 if i in (7, 8, 19, 31) else 4.0}

    quiet = busy_record(other_cores=0.1)
    quiet.steps = make_steps(phases)
    quiet.host = host_series(quiet.steps, cpu_system_pct=(2.1 + 0.1) / 4 * 100.0)
    assert run_rule("STEP_OUTLIERS", quiet) is not None
    busy = busy_record(other_cores=1.9)
    busy.steps = make_steps(phases)
    busy.host = host_series(busy.steps, cpu_system_pct=(2.1 + 1.9) / 4 * 100.0)
    assert run_rule("MACHINE_BUSY", busy) is not None
    assert run_rule("STEP_OUTLIERS", busy) is None


def busy_pool_record(busy_gemm: float | None, busy_elem: float | None, probe: list[int] | None = None):
    """A 2-thread pool on 2 cores beside a process holding one of them (the VAE trial beside a hog:
    each parallel op waited at its barrier for the thread sharing a core with it)."""
    rec = healthy_record(workers=[])
    rec.config = dataclasses.replace(rec.config, cores_usable=2, cores_total=2, torch_threads=2)
    rec.run = dataclasses.replace(rec.run, cores_usable=2, cores_total=2)
    rec.host = host_series(rec.steps, cpu_main_pct=100.0, cpu_workers_pct=None, workers_alive=0, cpu_system_pct=100.0)
    rec.probes = ProbeResults(op_overhead_ns=3000.0, busy_threads_speedup=busy_gemm,
                              busy_threads_elementwise_speedup=busy_elem,
                              busy_threads_probe=[2, 1] if probe is None else probe)
    return rec


def test_machine_busy_names_fewer_threads_where_the_pool_outnumbers_the_free_cores():
    rec = busy_pool_record(busy_gemm=4.0, busy_elem=8.0)
    f = run_rule("MACHINE_BUSY", rec)
    assert f is not None and "Other processes" in f.title
    assert "torch.set_num_threads(1)" in f.fix and "4.0x" not in f.title
    est_threads = f.evidence["fewer_threads_est"]
    assert est_threads is not None and est_threads > 1.5
    # A quiet machine gives the job at least the free core with nothing to wait for: a floor.
    assert f.est_speedup >= est_threads
    # The same run without the probe: the quiet estimate alone, no thread advice.
    bare = busy_pool_record(None, None, probe=[])
    g = run_rule("MACHINE_BUSY", bare)
    assert g is not None and "set_num_threads" not in g.fix and "fewer_threads_est" not in g.evidence
    assert g.est_speedup < f.est_speedup
    # The probe found fewer threads no faster beside them: nothing to advise.
    h = run_rule("MACHINE_BUSY", busy_pool_record(busy_gemm=0.9, busy_elem=1.0))
    assert h is not None and "set_num_threads" not in h.fix and h.evidence["fewer_threads_est"] is None


def test_busy_pool_pricing_keeps_the_ops_under_the_parallel_grain_at_one_thread():
    """The optimizer's per-parameter ops under ATen's grain run on the main thread at any pool size:
    they never wait at a barrier, so a larger serial share means a smaller fewer-threads estimate."""
    from stave.analyze.step_inputs import busy_pool_penalty, busy_pool_speed, busy_serial_s

    rec = busy_pool_record(busy_gemm=4.0, busy_elem=8.0)
    summary = summarize_steps(rec.steps)
    model = step_inputs(rec, summary)
    base = busy_serial_s(rec, model.serial_s)
    rec.config = dataclasses.replace(rec.config, serial_op_s_by_phase={"optimizer": 0.004, "forward": 0.5})
    # Forward's serial ops are in serial_s already (fixed_and_serial_s): only the other phases are added.
    assert busy_serial_s(rec, model.serial_s) == pytest.approx(base + 0.004)
    assert busy_pool_penalty(rec, summary, base) == pytest.approx(4.0)  # no rate: the products' ratio for all
    loose = busy_pool_speed(dataclasses.replace(rec, config=dataclasses.replace(rec.config, serial_op_s_by_phase={})),
                            summary, model.serial_s)
    tight = busy_pool_speed(rec, summary, model.serial_s)
    assert loose is not None and tight is not None and 1.0 < tight < loose < 4.0
    assert busy_pool_penalty(busy_pool_record(None, None, probe=[]), summary, base) is None


def test_small_batch_is_priced_on_the_step_at_the_free_cores():
    """Beside busy processes the barrier waits are MACHINE_BUSY's: SMALL_BATCH sees the compute as
    the busy-threads probe says it would run at the free cores, the data waits as measured."""
    from stave.analyze.step_inputs import busy_pool_speed, steps_at_free_cores
    from stave.diagnose.inputs import DoctorInput
    from stave.diagnose.rules._helpers import at_free_cores as _at_free_cores

    rec = busy_pool_record(busy_gemm=4.0, busy_elem=8.0)
    speed = busy_pool_speed(rec, summarize_steps(rec.steps), 0.0)
    assert speed is not None and speed > 1.5
    sped = steps_at_free_cores(rec, summarize_steps(rec.steps), 0.0)
    for before, after in zip(rec.steps, sped):
        assert after.data_wait_ns == before.data_wait_ns and after.eval_ns == before.eval_ns
        assert after.forward_ns == pytest.approx(before.forward_ns / speed, abs=2)
        assert after.other_ns == pytest.approx(before.other_ns / speed, abs=2)
        assert after.duration_ns == pytest.approx(before.data_wait_ns + (before.duration_ns - before.data_wait_ns) / speed,
                                                  abs=8)
    summary = summarize_steps(rec.steps)
    moved = _at_free_cores(DoctorInput(rec, summary))
    assert moved.summary.step_time_median_s < summary.step_time_median_s
    assert moved.summary.phase_s("data_wait") == pytest.approx(summary.phase_s("data_wait"))
    quiet = busy_pool_record(None, None, probe=[])
    same = DoctorInput(quiet, summarize_steps(quiet.steps))
    assert _at_free_cores(same) is same


def tiny_ops_beside_busy(large_ops: dict | None, probe: list[int] | None = None):
    """A batch-2 MLP beside one busy loop (tiny_model_batch2.py beside a hog): 73 ops, none over
    ATen's grain, a few FLOPs, each step 12 ms where alone it took 2 ms (log_softmax and nll_loss's
    backward enter the 2-thread pool at any size and wait for the thread sharing the busy core); the
    busy-threads probe's own ops showed almost nothing (1.0x, 1.3x)."""
    rec = busy_pool_record(busy_gemm=1.0, busy_elem=1.3, probe=probe)
    rec.config = dataclasses.replace(rec.config, aten_ops_by_phase={"forward": 6, "backward": 24, "optimizer": 38,
                                                                    "other": 5, "data_wait": 8},
                                     flops_by_phase={"forward": 8704, "backward": 9216}, large_ops_by_phase=large_ops,
                                     serial_ops_by_phase={"forward": 4, "backward": 21, "optimizer": 32, "other": 3},
                                     serial_op_s_by_phase={"forward": 7e-5, "backward": 3.5e-4, "optimizer": 6.4e-4,
                                                           "other": 1e-4})
    rec.probes = dataclasses.replace(rec.probes, op_overhead_ns=4500.0, matmul_flops_per_s=2e9)
    steps = []
    t = 1_000_000_000
    for s in rec.steps:
        phases = dict(data_wait_ns=400_000, forward_ns=400_000, backward_ns=5_500_000, optimizer_ns=900_000)
        steps.append(dataclasses.replace(s, start_ns=t, end_ns=t + 12_000_000, **phases))
        t += 12_000_000
    rec.steps = steps
    rec.host = host_series(rec.steps, cpu_main_pct=100.0, cpu_workers_pct=None, workers_alive=0, cpu_system_pct=100.0)
    return rec


def test_tiny_ops_beside_busy_processes_are_priced_at_their_dispatch_ceiling():
    """Ops that touch fewer elements than the grain cannot do ms of work: beside busy processes, time
    beyond OP_BOUND_MAX_DISPATCHES dispatches each is waiting. MACHINE_BUSY's fewer-threads fix is
    priced on that, and SMALL_BATCH, left unnamed when the waits looked like per-sample work, is
    named; an op over the grain (work that can grow with the data) or uncounted ops keep the probe's
    ratios alone."""
    from stave.analyze.step_inputs import OP_BOUND_MAX_DISPATCHES, busy_op_bound_s, busy_pool_speed

    rec = tiny_ops_beside_busy({"data_wait": 4})
    bounds = busy_op_bound_s(rec)
    # Not the time between the phases: the user's Python runs there too.
    assert bounds is not None and set(bounds) == {"forward", "backward", "optimizer"}
    assert bounds["backward"] == pytest.approx(24 * OP_BOUND_MAX_DISPATCHES * 4500e-9 + 9216 / 2e9)
    summary = summarize_steps(rec.steps)
    fast = busy_pool_speed(rec, summary, 0.0)
    machine = run_rule("MACHINE_BUSY", rec)
    batch = run_rule("SMALL_BATCH", rec)
    assert fast is not None and fast > 1.5
    assert machine is not None and machine.evidence["fewer_threads_est"] > 1.5
    assert batch is not None and batch.est_speedup > 5.0

    for other in ({"data_wait": 4, "backward": 1}, None):
        plain = tiny_ops_beside_busy(other)
        assert busy_op_bound_s(plain) is None
        slow = busy_pool_speed(plain, summary, 0.0)
        assert slow is None or slow < fast
        assert run_rule("SMALL_BATCH", plain) is None
    # A quiet run (no busy-threads probe): nothing moves.
    quiet = tiny_ops_beside_busy({"data_wait": 4}, probe=[])
    assert busy_pool_speed(quiet, summarize_steps(quiet.steps), 0.0) is None

