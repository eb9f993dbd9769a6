"""The step model on hand-made inputs: each equation of docs/doctor.md ("The step model") checked."""

from __future__ import annotations

import pytest

from stave.analyze.step_model import StepInputs, calibrated, compute_cores_wanted, device_busy_s, estimate, step_time

COMPUTE = {"data_wait": 0.0, "forward": 0.04, "backward": 0.05, "optimizer": 0.01, "other": 0.0}


def model(**kw) -> StepInputs:
    base = {"phases_s": dict(COMPUTE), "cores": 2.0, "compute_threads": 2.0}
    base.update(kw)
    return calibrated(StepInputs(**base))


def test_unchanged_inputs_reproduce_the_measured_step():
    for inp in (model(), model(workers=4, load_cpu_s=0.08), model(other_cores=1.0), model(workers=0, load_cpu_s=0.03)):
        measured = sum(inp.phases_s.values()) + (inp.load_cpu_s if inp.workers == 0 else 0.0)
        assert step_time(inp).step_s == pytest.approx(measured, rel=1e-6)
        assert estimate(inp, inp, measured) == pytest.approx(1.0)


def test_prefetched_loading_hides_behind_compute_up_to_the_compute_time():
    # 2 workers, 0.03 s of loading CPU per step, one thread of compute on 4 cores: no contention.
    hidden = model(cores=4.0, compute_threads=1.0, workers=2, load_cpu_s=0.03)
    assert step_time(hidden).bound == "compute" and step_time(hidden).step_s == pytest.approx(0.1)
    # 0.4 s of loading over 2 workers is 0.2 s per batch: the input bounds the step.
    slow = model(cores=8.0, compute_threads=1.0, workers=2, load_cpu_s=0.4)
    assert step_time(slow).bound == "input" and step_time(slow).step_s == pytest.approx(0.2, rel=0.01)


def test_main_process_loading_does_not_overlap():
    inp = model(workers=0, load_cpu_s=0.05, phases_s={**COMPUTE, "data_wait": 0.05})
    assert step_time(inp).step_s == pytest.approx(0.15, rel=1e-6)
    assert estimate(inp, inp.changed(load_cpu_s=0.0), 0.15) == pytest.approx(1.5, rel=1e-3)


def test_cpu_budget_stretches_compute_by_cores_wanted_over_cores():
    # 2 compute threads + 1 core of loading on 2 cores: every thread gets 2/3 of a core.
    inp = model(workers=4, load_cpu_s=0.15)
    st = step_time(inp)
    assert st.stretch == pytest.approx(st.cores_wanted / 2.0)
    assert st.stretch > 1.2
    # Halving the loading CPU lowers the stretch, and the model credits the step with it.
    assert estimate(inp, inp.changed(load_cpu_s=0.075), st.step_s) > 1.1


def test_fewer_threads_only_help_past_the_cores_with_a_measured_penalty():
    quiet = model(compute_threads=2.0)
    # One thread does the same CPU work on one core: slower, never estimated as a gain.
    assert estimate(quiet, quiet.changed(compute_threads=1.0), 0.1) == 1.0
    over = model(compute_threads=8.0, oversubscription_penalty=2.0)
    # Down to the cores: the measured penalty goes, fair share otherwise leaves the work rate alone.
    assert estimate(over, over.changed(compute_threads=2.0), 0.1) == pytest.approx(2.0, rel=0.01)


def test_batch_scale_amortizes_the_fixed_part_only():
    inp = model(fixed_s=0.05)
    # Per sample: (0.05 + 0.05 x 4) / 4 = 0.0625 against 0.1: 1.6x.
    assert estimate(inp, inp.changed(batch_scale=4.0), 0.1) == pytest.approx(1.6, rel=1e-3)
    assert estimate(model(fixed_s=0.0), model(fixed_s=0.0).changed(batch_scale=4.0), 0.1) == pytest.approx(1.0)


def test_other_processes_take_their_fair_share_and_the_unexplained_rest_is_kept():
    busy = model(other_cores=1.0)
    assert step_time(busy).stretch == pytest.approx(1.5)
    assert estimate(busy, busy.changed(other_cores=0.0), 0.1) == pytest.approx(1.5, rel=1e-3)
    # The measured step is 20 ms longer than the model explains: the fix saves the same 33 ms.
    assert estimate(busy, busy.changed(other_cores=0.0), 0.12) == pytest.approx(0.12 / (0.12 - 0.1 / 3), rel=1e-3)


def test_a_phase_speed_factor_shrinks_only_that_phase():
    inp = model()
    est = estimate(inp, inp.changed(phase_speed={"forward": 2.0, "backward": 2.0}), 0.1)
    assert est == pytest.approx(0.1 / (0.01 + 0.045), rel=1e-3)


def test_device_time_bounds_a_gpu_step():
    gpu = model(gpu=True, device_s=0.2)
    assert step_time(gpu).bound == "device" and step_time(gpu).step_s == pytest.approx(0.2)


def test_a_wait_the_workers_output_does_not_explain_is_exposed_and_removable():
    # Workers that keep up (0.02 s a batch against 0.1 s of compute), yet the step waited 0.03 s:
    # epoch starts, say. The model adds it to the step; a fix that removes the wait removes it.
    phases = {**COMPUTE, "data_wait": 0.03}
    inp = model(cores=8.0, compute_threads=1.0, workers=2, load_cpu_s=0.04, phases_s=phases)
    assert inp.wait_exposed_s == pytest.approx(0.03)
    assert step_time(inp).step_s == pytest.approx(0.13)
    from stave.analyze.step_model import without_phase_time

    assert estimate(inp, without_phase_time(inp, {"data_wait": 0.03}), 0.13) == pytest.approx(1.3, rel=1e-3)
    # More workers do not touch it: it is not the workers' steady output.
    assert estimate(inp, inp.changed(workers=4), 0.13) == pytest.approx(1.0)


def test_time_removed_from_forward_and_backward_takes_its_share_of_the_serial_part():
    # A per-sample loss loop: backward is mostly its nodes' replay, tiny ops on one thread. Removing
    # that replay removes serial time; the serial part left is its share of what remains.
    from stave.analyze.step_model import without_phase_time

    phases = {"forward": 0.0002, "backward": 0.002, "other": 0.0011}
    inp = model(phases_s=phases, serial_s=0.0022, stretch_measured=1.0)
    after = without_phase_time(inp, {"backward": 0.0013, "other": 0.0011})
    assert after.serial_s == pytest.approx(0.0022 * 0.0009 / 0.0022)
    # A saving outside forward and backward leaves it alone.
    assert without_phase_time(inp, {"other": 0.001}).serial_s == inp.serial_s


# --- several fixes at once: compose ------------------------------------------------------------------


def test_fixes_of_different_phases_compose_and_of_one_phase_add_up():
    from stave.analyze.step_model import compose, without_phase_time

    base = model(phases_s={**COMPUTE, "other": 0.05})
    measured = sum(base.phases_s.values())  # 0.15 s
    fwd = without_phase_time(base, {"forward": 0.02})
    other = without_phase_time(base, {"other": 0.03})
    more_other = without_phase_time(base, {"other": 0.01})
    both = compose(base, [(base, fwd), (base, other)])
    assert both.phases_s["forward"] == pytest.approx(0.02) and both.phases_s["other"] == pytest.approx(0.02)
    # Two savings in one phase add up, and never take it below zero.
    assert compose(base, [(base, other), (base, more_other)]).phases_s["other"] == pytest.approx(0.01)
    assert compose(base, [(base, other), (base, other)]).phases_s["other"] == 0.0
    gain = estimate(base, both, measured)
    assert gain == pytest.approx(0.15 / 0.10, rel=1e-3)
    # Two fixes of different phases buy more than either alone, less than their product would claim
    # for overlapping work (here they do not overlap, so the gain is exactly the saved time).
    assert gain > max(estimate(base, fwd, measured), estimate(base, other, measured))


def test_compose_multiplies_speed_factors_and_sets_counts():
    from stave.analyze.step_model import compose

    base = model()
    bf16 = base.changed(phase_speed={"forward": 2.0})
    compiled = base.changed(phase_speed={"forward": 1.5})
    threads = base.changed(compute_threads=1.0)
    out = compose(base, [(base, bf16), (base, compiled), (base, threads)])
    assert out.phase_speed["forward"] == pytest.approx(3.0)
    assert out.compute_threads == 1.0
    assert out.stretch_measured == base.stretch_measured  # calibration is not a fix's to change


def test_estimate_carries_the_inputs_it_priced():
    from stave.analyze.step_model import ModelEstimate

    base = model()
    after = base.changed(phase_speed={"backward": 2.0})
    est = estimate(base, after, 0.1)
    assert isinstance(est, ModelEstimate) and est.before is base and est.after is after
    assert not isinstance(est * 1.0, ModelEstimate)  # arithmetic gives a plain float


def test_contention_factor_from_the_neighbour_probe():
    from stave.analyze.step_model import CONTENTION_FACTOR_MAX_PER_CORE, contention_factor

    # 2 threads on 2 cores beside one spinner: fair sharing says 1.5x; 2.0x measured is k = 2.
    assert contention_factor(2.0, 2, 2) == pytest.approx(2.0)
    assert contention_factor(1.5, 2, 2) == pytest.approx(1.0)
    assert contention_factor(1.2, 2, 2) == 1.0  # never better than fair sharing
    assert contention_factor(None, 2, 2) == 1.0
    assert contention_factor(3.0, 2, 8) == 1.0  # the spinner had a core of its own: no information
    assert contention_factor(1.0, 1, 2) == 1.0 and contention_factor(50.0, 2, 2) == CONTENTION_FACTOR_MAX_PER_CORE * 2


def test_parallel_ops_pay_the_measured_contention_and_serial_work_the_fair_share():
    # The same run measured with k = 1 and k = 2: each reproduces its measured step, but moving 0.1 s
    # of main-process loading into a worker beside 2 compute threads on 2 cores buys less with k = 2.
    phases = {**COMPUTE, "data_wait": 0.1}
    fair = model(workers=0, load_cpu_s=0.1, phases_s=phases)
    barrier = model(workers=0, load_cpu_s=0.1, phases_s=phases, contention_factor=2.0)
    for inp in (fair, barrier):
        assert step_time(inp).step_s == pytest.approx(0.2, rel=1e-6)
    gain_fair = estimate(fair, fair.changed(workers=1), 0.2)
    gain_barrier = estimate(barrier, barrier.changed(workers=1), 0.2)
    assert gain_fair > gain_barrier >= 1.0
    # One compute thread has no barrier: k changes nothing.
    one = model(compute_threads=1.0, workers=0, load_cpu_s=0.1, phases_s=phases)
    one_k = model(compute_threads=1.0, workers=0, load_cpu_s=0.1, phases_s=phases, contention_factor=3.0)
    assert estimate(one, one.changed(workers=1), 0.2) == pytest.approx(estimate(one_k, one_k.changed(workers=1), 0.2))


def test_batches_moved_into_workers_pay_their_shared_memory_transfer():
    # Main-process loading of 0.05 s a step; moving it to 2 workers also makes them collate each
    # batch into shared memory (0.03 s a step here): the gain shrinks, and the unchanged inputs
    # (no workers) never pay it.
    phases = {**COMPUTE, "data_wait": 0.05}
    plain = model(workers=0, load_cpu_s=0.05, phases_s=phases, cores=8.0, compute_threads=1.0)
    shm = model(workers=0, load_cpu_s=0.05, phases_s=phases, cores=8.0, compute_threads=1.0, transfer_cpu_s=0.03)
    assert step_time(shm).step_s == pytest.approx(step_time(plain).step_s)
    assert step_time(shm.changed(workers=2)).producer_s > step_time(plain.changed(workers=2)).producer_s
    assert estimate(shm, shm.changed(workers=1), 0.15) <= estimate(plain, plain.changed(workers=1), 0.15)


def test_a_pool_larger_than_the_cores_is_not_stretched_twice():
    # 16 threads on 2 cores with a barrier factor of 3 measured beside one neighbour: the pool's own
    # over-commit (8x) is its threads' fair share, priced by the thread probe's penalty (2x here);
    # k only applies to what other threads add. Loading in the main process, where the same
    # parallel stretch applies as beside workers.
    phases = {**COMPUTE, "data_wait": 0.02}
    over = model(compute_threads=16.0, oversubscription_penalty=2.0, contention_factor=3.0, workers=0,
                 load_cpu_s=0.02, phases_s=phases)
    assert step_time(over).step_s == pytest.approx(0.12, rel=1e-6)
    # Down to the cores: the penalty goes (2x on the 0.1 s of compute), nothing more.
    assert estimate(over, over.changed(compute_threads=2.0), 0.12) == pytest.approx(0.12 / 0.07, rel=0.02)
    plain = model(compute_threads=16.0, oversubscription_penalty=2.0, workers=0, load_cpu_s=0.02, phases_s=phases)
    assert estimate(plain, plain.changed(compute_threads=2.0), 0.12) == pytest.approx(
        estimate(over, over.changed(compute_threads=2.0), 0.12), rel=0.02)


def test_fixed_seconds_keep_their_share_of_a_stretched_compute():
    # Half of a compute measured under an 8x fair share is fixed: a 4x batch grows the other half only.
    inp = model(compute_threads=16.0, fixed_s=0.05, workers=0, load_cpu_s=0.0)
    after = inp.changed(batch_scale=4.0)
    assert estimate(inp, after, 0.1) == pytest.approx(4 * 0.1 / (0.05 + 4 * 0.05), rel=0.02)


def test_a_loader_that_cannot_keep_up_wants_a_core_per_worker():
    # Main-process loading of 0.2 s a step moved into 2 workers beside a 2-thread pool on 2 cores:
    # the workers never catch up, so both are runnable the whole step: 4 threads on 2 cores, each
    # worker gets half a core and a batch costs its loading CPU at half speed over 2 workers.
    before = model(workers=0, load_cpu_s=0.2, phases_s={**COMPUTE, "data_wait": 0.2})
    st = step_time(before.changed(workers=2))
    assert st.bound == "input" and st.cores_wanted == pytest.approx(4.0, rel=1e-3)
    assert st.producer_s == pytest.approx(0.2 * 2.0 / 2, rel=1e-3)
    # Counting their CPU used instead (0.2 s over the step: about one core) would have given the
    # workers 2/3 of a core each and a step of 0.2 * 1.5 / 2 = 0.15 s.
    assert st.step_s > 0.19


def test_a_pool_that_fits_spins_the_whole_step_and_a_larger_one_sleeps_outside_the_compute():
    fits = model(compute_threads=2.0)
    assert compute_cores_wanted(fits, 0.25) == 2.0
    over = model(compute_threads=8.0)
    assert compute_cores_wanted(over, 1.0) == 8.0
    assert compute_cores_wanted(over, 0.25) == pytest.approx(1.0 + 7.0 * 0.25)
    # So workers beside an oversubscribed pool that computes a quarter of the step get more of a
    # core than the compute's own stretch.
    st = step_time(model(compute_threads=8.0, workers=2, load_cpu_s=0.3, phases_s={**COMPUTE, "forward": 0.0,
                                                                                  "backward": 0.02}))
    assert st.loader_stretch < st.stretch


def test_without_run_delay_the_workers_wait_off_cpu_is_split_by_the_fair_share():
    # 2 workers, 0.05 s of CPU and 0.04 s off CPU per step, beside 2 compute threads on 2 cores.
    hidden = model(workers=2, load_cpu_s=0.05, load_blocked_s=0.04, load_queue_measured=False)
    assert hidden.load_queue_measured
    # The fair share's wait for a core (stretch - 1 per CPU-second) comes out of the measured time
    # off CPU; together they are still what was measured, and the step is reproduced.
    assert hidden.load_queue_per_cpu == pytest.approx(min(0.04 / 0.05, hidden.loader_stretch_measured - 1.0))
    assert hidden.load_cpu_s * hidden.load_queue_per_cpu + hidden.load_blocked_s == pytest.approx(0.04)
    assert step_time(hidden).step_s == pytest.approx(0.1, rel=1e-6)
    # Little time off CPU bounds the wait for a core whatever the fair share says.
    little = model(workers=2, load_cpu_s=0.05, load_blocked_s=0.002, load_queue_measured=False)
    assert little.load_queue_per_cpu == pytest.approx(0.04) and little.load_blocked_s == pytest.approx(0.0)


def test_the_measured_compute_stretch_holds_the_model_where_the_workers_took_less():
    # Six workers whose wake-ups wait long for a core (2.35 s per CPU-second) beside a 2-thread pool
    # on 2 cores: their fair-share runnable time says the compute ran stretched, and so that one
    # fewer thread would free a core for it. The trainer's own CPU says its threads had 1.88 of
    # their 2 cores while computing: the calibration holds the stretch there, the step is still the
    # measured one, and one thread fewer is then no gain (measured on the planted script: 0.6x).
    phases = {"data_wait": 0.001, "forward": 0.024, "backward": 0.019, "optimizer": 0.0007, "other": 0.001}
    kw = dict(phases_s=phases, workers=6, load_cpu_s=0.035, load_queue_per_cpu=2.35, contention_factor=2.2)
    free = model(**kw)
    held = model(**kw, compute_stretch_cpu=2.0 / 1.88)
    measured = sum(phases.values())
    assert free.stretch_measured > 1.3
    assert held.stretch_measured == pytest.approx(2.0 / 1.88, rel=0.02)
    assert held.loader_compute_share < 1.0
    assert step_time(held).step_s == pytest.approx(measured, rel=0.02)
    assert estimate(free, free.changed(compute_threads=1.0), measured) > 1.05
    assert estimate(held, held.changed(compute_threads=1.0), measured) == pytest.approx(1.0)
    # A measured stretch above the model's is blocking or sleeping as much as contention: ignored.
    slow = model(**kw, compute_stretch_cpu=3.0)
    assert slow.loader_compute_share == 1.0
    assert slow.stretch_measured == pytest.approx(free.stretch_measured, rel=1e-6)


def test_starting_workers_adds_the_delivery_both_sides():
    # Main-process loading of 12 ms a step beside 2.5 ms of compute: 2 workers would hide most of
    # it, but each batch then costs a worker 1.2 ms more (shared memory, pickling, the pipe) and the
    # trainer 0.9 ms to receive it (the delivery probe, cpu_transforms' numbers).
    phases = {"data_wait": 0.012, "forward": 0.001, "backward": 0.0013, "optimizer": 0.0002, "other": 0.0}
    bare = model(workers=0, load_cpu_s=0.012, phases_s=phases)
    paid = model(workers=0, load_cpu_s=0.012, phases_s=phases, transfer_cpu_s=0.0012, receive_s=0.0009)
    measured = sum(phases.values())
    # The measured run loaded in the main process: neither cost is in it.
    assert step_time(paid).step_s == pytest.approx(step_time(bare).step_s)
    gain_bare = estimate(bare, bare.changed(workers=2), measured)
    gain_paid = estimate(paid, paid.changed(workers=2), measured)
    assert gain_paid < gain_bare
    after = step_time(paid.changed(workers=2))
    assert after.compute_s == pytest.approx(step_time(bare.changed(workers=2)).compute_s + 0.0009, rel=0.05)


def test_a_measured_spin_bounds_what_a_fitting_pool_takes_outside_the_compute():
    spins = model(compute_threads=2.0, pool_spin_s=0.005)
    # A quarter of a 40 ms step computing (both threads), then the other thread spins 5 ms of it.
    assert compute_cores_wanted(spins, 0.25, step_s=0.04) == pytest.approx(2.0 * 0.25 + 1.0 * 0.125)
    assert compute_cores_wanted(spins, 1.0, step_s=0.04) == 2.0
    assert compute_cores_wanted(spins, 0.25) == 2.0  # no step length: the whole step, as unmeasured
    # Main-process loading of 54 ms beside 3.3 ms of compute (main_process_png_decode's numbers):
    # two workers get more of the cores from a pool that sleeps through the wait.
    phases = {"data_wait": 0.054, "forward": 0.0012, "backward": 0.0015, "optimizer": 0.0002, "other": 0.0003}
    measured = sum(phases.values())
    whole = model(workers=0, load_cpu_s=0.054, phases_s=phases)
    spin = model(workers=0, load_cpu_s=0.054, phases_s=phases, pool_spin_s=0.0075)
    assert step_time(spin).step_s == pytest.approx(step_time(whole).step_s)  # the measured run is unchanged
    assert estimate(spin, spin.changed(workers=2), measured) > estimate(whole, whole.changed(workers=2), measured) + 0.2
    # The pool's share of the loading's torch ops moves onto the workers' one thread each.
    serial = model(workers=0, load_cpu_s=0.054, phases_s=phases, pool_spin_s=0.0075, load_thread_factor=2.0)
    assert estimate(serial, serial.changed(workers=2), measured) < estimate(spin, spin.changed(workers=2), measured)


def test_the_pools_wake_up_is_paid_only_after_waits_it_sleeps_through():
    # io_latency_main's numbers: 68 ms of blocked reads in the main process, a 10.5 ms forward of
    # which 10 ms is the pool waking (the wake probe: paid from 32 ms of idle, not at 16).
    phases = {"data_wait": 0.068, "forward": 0.0105, "backward": 0.0004, "optimizer": 0.0003, "other": 0.0003}
    measured = sum(phases.values())
    woken = model(workers=0, load_blocked_s=0.068, phases_s=phases, wake_s=0.010, wake_min_wait_s=0.032)
    plain = model(workers=0, load_blocked_s=0.068, phases_s=phases)
    # The measured run paid it (68 ms >= 32 ms): the model gives back the measured step.
    assert step_time(woken).step_s == pytest.approx(step_time(plain).step_s)
    # Eight workers leave the main thread waiting ~7.4 ms a step: the pool stays awake.
    fixed = woken.changed(workers=8)
    assert step_time(fixed).step_s == pytest.approx(0.0085)  # the producer: 68 ms of reads over 8
    assert step_time(plain.changed(workers=8)).step_s == pytest.approx(0.0115)  # the woken compute
    assert estimate(woken, fixed, measured) > 1.3 * estimate(plain, plain.changed(workers=8), measured)
    # Two workers leave it waiting ~33 ms: the wake stays in the step.
    two = woken.changed(workers=2)
    assert step_time(two).step_s == pytest.approx(step_time(plain.changed(workers=2)).step_s, rel=1e-6)


def test_a_gpu_bound_step_shrinks_with_the_device_work_a_fix_speeds_up():
    # A GPU-bound step: 30 ms of kernels in forward and backward, the host far ahead of them.
    phases = {"data_wait": 0.0, "forward": 0.010, "backward": 0.020, "optimizer": 0.0, "other": 0.0}
    gpu = model(phases_s=phases, gpu=True, device_s=0.030, device_fixed_s=0.001)
    assert device_busy_s(gpu) == pytest.approx(0.030)
    # bf16 4x faster on forward and backward: the device's work in them shrinks 4x, its kernels'
    # fixed time does not (before, the floor stayed at the measured 30 ms: no gain priced at all).
    faster = gpu.changed(phase_speed={"forward": 4.0, "backward": 4.0})
    assert device_busy_s(faster) == pytest.approx(0.001 + 0.029 / 4)
    assert estimate(gpu, faster, 0.030) == pytest.approx(4.0, rel=0.1)
    # A 4x batch: the work grows 4x, each kernel's minimum time stays.
    assert device_busy_s(gpu.changed(batch_scale=4.0)) == pytest.approx(0.001 + 0.029 * 4)
    # A launch-bound step whose kernels are all minimum-time: a larger batch leaves the device's time.
    tiny = model(phases_s=phases, gpu=True, device_s=0.0004, device_fixed_s=0.0006)
    assert device_busy_s(tiny.changed(batch_scale=32.0)) == pytest.approx(0.0004)
    assert device_busy_s(model()) is None
