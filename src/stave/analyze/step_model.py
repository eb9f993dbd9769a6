"""The one model of the step and the machine: measured inputs in, a step time out.

Every finding's ``est_speedup`` is the model's step time before its fix over the step time after
it, where the fix is a change to the model's inputs (:class:`StepInputs`): ``workers 6 -> 2``,
``compute_threads 2 -> 1``, ``load_cpu_s / 8``, ``batch_scale 1 -> 4``, a phase's speed factor.
The model is pure (numbers in, numbers out) and small; docs/doctor.md ("The step model") states it
and each docs/findings page says which inputs its fix changes.

The step, per optimizer step (seconds):

* **compute** ``C``: h2d + forward + backward + optimizer + other, the main thread's work. Part of
  it (``serial_s``: per-op dispatch and serial kernels) runs on one thread whatever the thread
  count; the rest on ``compute_threads`` threads. ``fixed_s`` of it does not grow with the batch.
* **the CPU budget**: runnable threads want cores: the trainer's compute threads, the loader
  workers' CPU (spread over the step), the pin-memory thread, other processes on the machine.
  With ``R`` wanting ``c`` usable cores a fair scheduler gives each ``c / R`` of a core: the
  fair-share stretch ``f = max(1, R / c)``, which single-threaded work (the loader workers, the
  per-op dispatch) pays. A parallel op waits at its barrier for the thread that lost its core, so
  it pays more: ``1 + k (f - 1)``, where ``k`` (``contention_factor``, >= 1) is measured by the
  neighbour probe (the step's own products at its thread count beside one busy process; 2 threads
  on 2 cores measured 1.8-2.5x for a square GEMM and 2.3-5.5x for small convolutions where fair
  sharing says 1.5x, so ``k`` ~1.6-9 there, capped below).
  Threads beyond the cores also pay the oversubscription penalty the thread probe measured.
* **the input**: loader workers prepare batches alongside the compute; a prefetched batch hides
  behind the compute up to the compute time, so ``T = max(C, producer time per batch)``. Loading
  in the main process (``workers == 0``) does not overlap: ``T = C + load``.
* **on a GPU** the host's compute phases are what the device timeline shows; the launch queue
  bounds a step from below by ``device_s`` (GPU busy time) when known.

The model's step before a fix is matched to the measured one (:func:`estimate`): whatever of the
measured step the model leaves unexplained (jitter, imperfect overlap) is kept in both, so a fix
is credited only with the time the model says it saves.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from stave.analyze.breakdown import StepSummary

# Phases the main thread spends computing (everything but the wait for data).
COMPUTE_PHASES = ("h2d", "forward", "backward", "optimizer", "other")
# Fixed-point iterations for T (the loader's cores depend on T, and T on the cores). The map is a
# contraction in practice; 30 rounds settle it to well under a microsecond.
FIXED_POINT_ROUNDS = 30
# The calibration's rounds are damped (half a step each), so they get twice as many.
CALIBRATION_ROUNDS = 2 * FIXED_POINT_ROUNDS


@dataclass(frozen=True)
class StepInputs:
    """What the model reads. Seconds are per optimizer step; cores are cores' worth of CPU.

    ``phases_s``: measured mean seconds of each phase (data_wait, h2d, forward, backward,
    optimizer, other), taken as they ran under this run's contention ``stretch_measured``.
    ``phase_speed``: per-phase speed factor a fix applies (bf16 2x on forward: ``{"forward": 2}``).
    ``compute_threads``: the trainer's intra-op threads that actually run (measured busy, or the
    configured count when the machine was saturated and could not show it).
    ``serial_s``: compute time on one thread whatever the pool size (per-op dispatch, and kernels
    that run serially: random numbers such as dropout's mask, ops under ATen's parallel grain).
    ``fixed_s``: compute time that does not grow with the batch (optimizer, per-op dispatch).
    ``workers``: loader worker processes (0: loading in the main thread).
    ``load_cpu_s`` / ``load_blocked_s``: one step's samples: CPU-seconds, and seconds blocked off
    CPU (storage latency) as one loader sees them. ``load_extra_s``: main-process only, the part
    of the measured wait beyond the samples' loading (sampler, fetch, collate overhead).
    ``load_queue_per_cpu``: seconds the loading sat runnable waiting for a core per CPU-second
    (schedstat run_delay), measured under ``stretch_measured``; it scales with the stretch.
    ``wait_exposed_s``: with workers, the data wait their steady output does not explain (epoch
    starts, the main thread's unpickling of each batch, jitter): added to the step, not hidden.
    ``pin_cpu_s``: CPU-seconds of the pin-memory thread. ``other_cores``: cores held by processes
    outside the job. ``cores``: usable cores (affinity, cgroup quota).
    ``oversubscription_penalty``: the thread probe's measured slowdown of threads > cores (1: none).
    ``batch_scale``: samples per step relative to the measured run. ``device_s``: GPU busy time.
    ``contention_factor``: how much more than fair sharing a parallel op stretches per runnable
    thread beyond the cores (1: fair sharing; from the neighbour probe, see :func:`contention_factor`).
    ``transfer_cpu_s``: CPU-seconds per step a worker would spend delivering the step's batches
    beyond the main process's fetch (collating into shared memory, pickling, sending), for a run that
    loaded in the main process (the delivery probe, else the shared-memory probe); the model adds it
    to the loading when a fix starts workers. A run with workers has it in ``load_cpu_s``.
    ``receive_s``: the trainer's side of that delivery per step (see the field).
    """

    phases_s: dict[str, float]
    cores: float
    compute_threads: float = 1.0
    serial_s: float = 0.0
    fixed_s: float = 0.0
    workers: int = 0
    load_cpu_s: float = 0.0
    load_blocked_s: float = 0.0
    load_extra_s: float = 0.0
    load_queue_per_cpu: float = 0.0
    wait_exposed_s: float = 0.0
    pin_cpu_s: float = 0.0
    other_cores: float = 0.0
    oversubscription_penalty: float = 1.0
    phase_speed: dict[str, float] = field(default_factory=dict)
    batch_scale: float = 1.0
    samples_per_step: float = 0.0
    contention_factor: float = 1.0
    transfer_cpu_s: float = 0.0
    # Seconds per step the trainer's ``next()`` would spend receiving the step's batches from workers
    # (the delivery probe), for a run that loaded in the main process; a fix that starts workers adds
    # it to the main thread's step. A run with workers has it in its measured data wait.
    receive_s: float = 0.0
    # Seconds each pool thread spins after the compute's last parallel region (the spin probe);
    # ``None``: the whole step (see :func:`compute_cores_wanted`).
    pool_spin_s: float | None = None
    # Main-process loading only: the loading's CPU on a worker's one thread over the main thread's
    # measured ``load_cpu_s`` (>= 1; see step_inputs.load_thread_factor). A fix that starts workers pays it.
    load_thread_factor: float = 1.0
    # Seconds per step the first parallel op after a long wait spends waking the pool's sleeping
    # threads (the wake probe, held to what the run's forward shows; see step_inputs.pool_wake_s),
    # included in the measured forward; paid by a step whose pool idles at least ``wake_min_wait_s``
    # (its wait for data, or its main-process loading).
    wake_s: float = 0.0
    wake_min_wait_s: float = float("inf")
    gpu: bool = False
    device_s: float | None = None
    # The part of ``device_s`` that does not grow with the batch: every kernel occupies the GPU for a
    # minimum time however little it computes (see step_inputs.GPU_KERNEL_MIN_S). The rest grows
    # with ``batch_scale`` and shrinks with the ``phase_speed`` of the phases it runs in.
    device_fixed_s: float = 0.0
    # CPU-seconds per step of work a fix moves into the trainer's compute (not measured there, so not
    # taken back from any stretch): a per-sample transform run once on the collated batch by the
    # intra-op threads. It is per-sample work: it grows with the batch.
    moved_compute_cpu_s: float = 0.0
    # The compute stretch the phases were measured under; set by :func:`calibrated` so the model
    # can take it out before applying a fix's own stretch.
    stretch_measured: float = 1.0

    # The thread count the phases were measured with (set by :func:`calibrated`).
    threads_measured: float = 1.0
    # The stretch the loader workers ran under in the measured run (set by :func:`calibrated`); it
    # differs from ``stretch_measured`` only for a pool larger than the cores (see
    # :func:`compute_cores_wanted`).
    loader_stretch_measured: float = 1.0
    # Whether ``load_queue_per_cpu`` was measured (the run_delay counter); without it the
    # calibration splits the workers' measured wait off CPU between a wait for a core and blocking.
    load_queue_measured: bool = True
    # The compute's fair-share stretch as the trainer's own CPU counters measured it (its threads'
    # wanted cores over the cores they got while computing; ``None``: not measured). The calibration
    # holds the model's stretch of the measured run to it where the model would say more.
    compute_stretch_cpu: float | None = None
    # The share of the loader's fair-share runnable cores that took a core from the compute (set by
    # :func:`calibrated`; 1 unless the measured compute stretch says the workers took less).
    loader_compute_share: float = 1.0

    def changed(self, **changes: object) -> "StepInputs":
        """These inputs with a fix applied (a copy; the inputs are never mutated)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class StepTime:
    """The model's answer: step time and what set it."""

    step_s: float
    compute_s: float
    producer_s: float
    stretch: float
    cores_wanted: float
    bound: str
    # The fair-share stretch the loader workers run under (the compute's ``stretch`` or less).
    loader_stretch: float = 1.0


def _threads_wanted(inp: StepInputs) -> float:
    return max(1.0, inp.compute_threads)


# libgomp (the OpenMP runtime of torch's Linux wheels) spins a waiting pool thread GOMP_SPINCOUNT
# times (300,000 by default) before it sleeps, but only 1,000 times when the pool has more threads
# than CPUs (its documented default). So a pool that fits the cores keeps its threads runnable
# between parallel regions (measured: the idle pool thread of a 2-thread trainer at a full core
# while its main thread loaded samples with torch ops), and for about 7.5 ms after the last one
# (the spin probe, 2-core Zen 4); a larger pool sleeps outside the compute, its main thread the only
# one that wants a core then.


def compute_cores_wanted(inp: StepInputs, compute_share: float = 1.0, step_s: float | None = None) -> float:
    """Cores the trainer's compute threads want over a step whose compute takes ``compute_share`` of
    it: a pool larger than the cores, the pool during the compute and the main thread for the rest.

    A pool that fits the cores keeps its threads spinning after each parallel region. Without a
    measured spin (or a step length), they are taken to spin the whole step. With one
    (``pool_spin_s``), the pool wants its threads during the compute and its other threads for the
    spin after it. The main thread waits for its data asleep.
    """
    threads = _threads_wanted(inp)
    share = min(1.0, max(0.0, compute_share))
    if threads <= inp.cores:
        if inp.pool_spin_s is None or step_s is None or step_s <= 0 or share >= 1.0:
            return threads
        spin_share = min(1.0 - share, inp.pool_spin_s / step_s)
        return threads * share + (threads - 1.0) * spin_share
    return 1.0 + (threads - 1.0) * share


def stretch_for(inp: StepInputs, loader_cores: float, compute_share: float = 1.0, step_s: float | None = None) -> float:
    """Slowdown of every runnable thread from the CPU budget: wanted cores over usable cores, >= 1.

    ``compute_share`` 1 gives the stretch during the compute (every compute thread runnable); the
    step's share of compute gives the stretch a thread that runs the whole step sees on average
    (``step_s``: the step's length, for the pool's spin after the compute).
    """
    if inp.gpu:
        return 1.0
    wanted = compute_cores_wanted(inp, compute_share, step_s) + loader_cores + inp.other_cores
    return max(1.0, wanted / max(inp.cores, 1e-9))


def _serial_stretch(inp: StepInputs, stretch: float, threads: float) -> float:
    """The stretch the main thread's serial work pays under fair-share ``stretch`` with ``threads``
    in the pool: a pool larger than the cores sleeps between parallel regions (libgomp's short spin,
    above), so its other threads want no core then; a pool that fits spins beside it."""
    if inp.gpu or threads <= inp.cores:
        return stretch
    return max(1.0, stretch - (threads - 1.0) / max(inp.cores, 1e-9))


def _penalty(inp: StepInputs, threads: float) -> float:
    return max(1.0, inp.oversubscription_penalty) if threads > inp.cores else 1.0


# The neighbour probe's stretch read as a contention factor is bounded: a barrier-bound op can
# lose at most the whole of the core its slowest thread shares (k = cores per extra thread), and
# spin-waiting siblings and cache thrash can add to it; beyond twice that the probe itself was
# disturbed, and the cap keeps one bad reading from dominating every estimate.
CONTENTION_FACTOR_MAX_PER_CORE = 2.0


def contention_factor(neighbour_stretch: float | None, threads: int, cores: int) -> float:
    """``k`` of the parallel stretch from the neighbour probe: the step's products (or one matmul) on
    ``threads`` threads beside one busy process over the same alone, on ``cores`` usable cores.

    Fair sharing predicts the probe's stretch ``f1 = max(1, (t + 1) / c) / max(1, t / c)``; the
    measured one is ``1 + k (f1 - 1)``. ``None`` or no over-commit in the probe (t + 1 <= c: the
    neighbour had a core of its own) leaves fair sharing, ``k = 1``.
    """
    if neighbour_stretch is None or threads < 2 or cores < 1:
        return 1.0
    fair1 = max(1.0, (threads + 1) / cores) / max(1.0, threads / cores)
    if fair1 <= 1.0:
        return 1.0
    k = (neighbour_stretch - 1.0) / (fair1 - 1.0)
    return min(max(1.0, k), CONTENTION_FACTOR_MAX_PER_CORE * cores)


def _parallel_stretch(inp: StepInputs, fair: float, threads: float) -> float:
    """The stretch of a parallel op (``threads`` > 1) under fair-share stretch ``fair``: it waits at
    its barrier for the thread that lost its core, ``1 + k (fair - 1)``; one thread pays ``fair``.

    A pool larger than the cores is over-committed by its own threads (``own = threads / cores``):
    that part is the fair share of its own threads, whose barrier cost the thread probe prices
    (``oversubscription_penalty``); ``k`` applies only to the further stretch other runnable threads
    add, ``own (1 + k (fair / own - 1))``, so the two are not counted twice.
    """
    if threads <= 1.0 or fair <= 1.0:
        return fair
    own = max(1.0, threads / max(inp.cores, 1e-9))
    if fair <= own:
        return fair
    return own * (1.0 + max(1.0, inp.contention_factor) * (fair / own - 1.0))


def _compute_s(inp: StepInputs, stretch: float) -> float:
    """The main thread's compute per step under fair-share ``stretch``, after the fix's speed, batch
    and thread changes.

    The measured compute is taken back to no contention: its serial part (``serial_s``, per-op
    dispatch and serial kernels on one thread) ran under the measured fair-share stretch (less the
    pool's own threads when it is larger than the cores: it sleeps then), the rest under the parallel
    stretch of the measured thread count. That parallel part is CPU work split over the threads,
    so it scales with measured threads / new threads; work a fix moves into the compute
    (``moved_compute_cpu_s``) joins it. Threads beyond the cores add no throughput
    (the stretch holds them to a fair share) and pay ``oversubscription_penalty``.
    """
    total = 0.0
    for phase in COMPUTE_PHASES:
        # The pool's wake-up is latency, not work: step_time adds it where the step's wait pays it.
        wake = min(inp.wake_s, inp.phases_s.get(phase, 0.0)) if phase == "forward" else 0.0
        total += (inp.phases_s.get(phase, 0.0) - wake) / max(inp.phase_speed.get(phase, 1.0), 1e-9)
    fair_m = max(inp.stretch_measured, 1e-9)
    serial_m = _serial_stretch(inp, fair_m, max(1.0, inp.threads_measured))
    serial = min(inp.serial_s, total / serial_m)
    par_m = max(0.0, total - serial * serial_m) / _parallel_stretch(inp, fair_m, max(1.0, inp.threads_measured))
    base = serial + par_m
    # fixed_s is measured seconds, stretched as the compute was: the same share of the de-stretched base.
    fixed = min(inp.fixed_s * base / total, base) if total > 0 else 0.0
    parallel = (par_m * max(1.0, inp.threads_measured) + max(0.0, inp.moved_compute_cpu_s)) / _threads_wanted(inp)
    if not inp.gpu:
        # The measured run paid the penalty when its threads exceeded the cores; the fix pays it
        # when its threads do.
        parallel *= _penalty(inp, inp.compute_threads) / _penalty(inp, inp.threads_measured)
    # Fixed per-step work stays; the rest grows with the batch.
    per_step = fixed + (serial + parallel - fixed) * inp.batch_scale if serial + parallel > fixed else serial + parallel
    # The serial part pays the fair share; the rest (parallel ops, and the optimizer's share of
    # the fixed time) pays the parallel stretch of the threads the fix leaves.
    serial_now = min(serial, per_step)
    return (serial_now * _serial_stretch(inp, stretch, _threads_wanted(inp))
            + (per_step - serial_now) * _parallel_stretch(inp, stretch, _threads_wanted(inp)))


def _loading_s(inp: StepInputs, load_cpu_s: float, stretch: float | None) -> float:
    """Wall time of the loading's CPU part: its CPU plus its wait for a core.

    In the main thread (``stretch`` None) the loading runs while the compute threads wait, so it
    keeps its measured wait per CPU-second. In workers it runs beside the compute: the measured
    wall per CPU-second (the run_delay counter, or the fair-share stretch where that is larger or
    hidden) scales with the loader stretch the fix leads to.
    """
    measured_per_cpu = 1.0 + inp.load_queue_per_cpu
    if stretch is None:
        return load_cpu_s * measured_per_cpu
    # The measured wait is what the workers saw at the measured stretch; it scales with the stretch
    # a fix leads to, and a worker never runs faster than its CPU.
    return load_cpu_s * max(1.0, measured_per_cpu * stretch / max(inp.loader_stretch_measured, 1e-9))


def step_time(inp: StepInputs) -> StepTime:
    """The model's step time for ``inp`` (see the module docstring for the equations)."""
    k = inp.batch_scale
    # Batches loaded in workers cross to the trainer through shared memory; the main process's
    # own loading never pays that (transfer_cpu_s is only set for such a run).
    load_cpu = (inp.load_cpu_s * (inp.load_thread_factor if inp.workers > 0 else 1.0)
                + (inp.transfer_cpu_s if inp.workers > 0 else 0.0)) * k
    blocked = inp.load_blocked_s * k
    pin = inp.pin_cpu_s * k
    if inp.workers <= 0:
        # Main-process loading: no overlap; the pin thread and other processes still want cores.
        compute0 = _compute_s(inp, 1.0)
        stretch = stretch_for(inp, pin / max(compute0, 1e-9))
        # The same stretch as beside workers: the serial part pays the fair share, parallel ops more.
        compute = _compute_s(inp, stretch)
        load = _loading_s(inp, load_cpu, None) + blocked + inp.load_extra_s * k
        # The pool idles while the main thread loads: past its spin it sleeps and the first op wakes it.
        compute += _wake_after(inp, load)
        # The loading ran outside the compute: beside the pool's threads if they spin (a pool that
        # fits the cores), beside the main thread alone if they sleep, and the other processes.
        loading_stretch = stretch_for(inp, pin / max(compute0, 1e-9), compute_share=0.0)
        st = StepTime(compute + load, compute, load, stretch, _threads_wanted(inp) + inp.other_cores, "serial",
                      loading_stretch)
        return _device_bound(inp, st)
    receive = inp.receive_s * k
    t = _compute_s(inp, 1.0) + receive + (load_cpu + blocked) / inp.workers
    stretch, loader_stretch, compute, producer, loader_cores = 1.0, 1.0, 0.0, 0.0, 0.0
    for _ in range(FIXED_POINT_ROUNDS):
        # What the compute shares its cores with is the loader's threads while they run or wait for
        # a core at the fair share: its CPU stretched by the loader's fair-share stretch, spread over
        # the step, at most a core per worker. (Not the measured wait for a core: a worker woken from
        # a read waits briefly for a core the compute holds, which takes nothing from the compute.)
        loader_cores = min(float(inp.workers), (load_cpu + pin) * loader_stretch / max(t, 1e-9)) \
            * inp.loader_compute_share
        stretch = stretch_for(inp, loader_cores)
        compute = _compute_s(inp, stretch)
        # What a worker gets is its fair share among the threads runnable beside it: the pool's
        # (the whole step for a pool that fits: it spins) and the workers that are runnable, each
        # for the wall time its loading takes (its CPU plus its wait for a core). A loader that
        # cannot keep up is runnable the whole step: a core wanted per worker, however little of
        # one it gets.
        loading_wall = _loading_s(inp, load_cpu, loader_stretch) + pin * loader_stretch
        loader_runnable = min(float(inp.workers), loading_wall / max(t, 1e-9))
        loader_stretch = stretch_for(inp, loader_runnable, compute_share=compute / max(t, 1e-9), step_s=t)
        # A worker gets the same fair share of a core as every other runnable thread.
        producer = (_loading_s(inp, load_cpu, loader_stretch) + blocked) / inp.workers
        # The trainer receives each batch on its main thread, after the batch is ready; a wait long
        # enough for the pool to fall asleep adds its wake-up to the compute that follows.
        wake = _wake_after(inp, producer - compute - receive)
        t = max(compute + receive + wake, producer)
    compute += receive + wake
    bound = "compute" if compute >= producer else "input"
    wanted = _threads_wanted(inp) + loader_cores + inp.other_cores
    st = StepTime(t + inp.wait_exposed_s, compute, producer, stretch, wanted, bound, loader_stretch)
    return _device_bound(inp, st)


def _wake_after(inp: StepInputs, idle_s: float) -> float:
    """The pool's wake-up paid after the main thread leaves it idle ``idle_s`` (0 when it stays awake)."""
    return inp.wake_s if inp.wake_s > 0 and idle_s >= inp.wake_min_wait_s else 0.0


# The phases whose GPU work is kernels (NVML's utilization counts kernels; the copy engine's
# transfers and the host's gaps are not in it).
DEVICE_PHASES = ("forward", "backward", "optimizer")


def device_busy_s(inp: StepInputs) -> float | None:
    """The GPU's busy seconds per step under the inputs' changes (None when not measured).

    The measured busy time less its fixed part (each kernel's minimum time) grows with the batch and
    runs ``phase_speed`` times faster in the phases a fix speeds up, weighted by the phases' measured
    time: bf16 on forward and backward shrinks the device's work as it shrinks theirs. (Before this
    the floor was the measured busy time times the batch scale, and a bf16 fix on a GPU-bound fp32
    step was priced at no gain however fast the probe found bf16.)
    """
    if inp.device_s is None:
        return None
    fixed = min(max(inp.device_fixed_s, 0.0), inp.device_s)
    phases = [p for p in DEVICE_PHASES if inp.phases_s.get(p, 0.0) > 0]
    total = sum(inp.phases_s[p] for p in phases)
    speed = (sum(inp.phases_s[p] / max(inp.phase_speed.get(p, 1.0), 1e-9) for p in phases) / total
             if total > 0 else 1.0)
    return fixed + (inp.device_s - fixed) * inp.batch_scale * speed


def _device_bound(inp: StepInputs, st: StepTime) -> StepTime:
    """On a GPU the host cannot run ahead of the device by more than its launch queue: the step is at
    least the device's busy time."""
    busy = device_busy_s(inp)
    if busy is not None and busy > st.step_s:
        return dataclasses.replace(st, step_s=busy, bound="device")
    return st


def calibrated(inp: StepInputs) -> StepInputs:
    """The inputs matched to the measured run: ``stretch_measured`` set to the stretch the model sees
    in it, and, when the step waited for data longer than the workers' steady output explains, that
    part of the wait set as ``wait_exposed_s`` (epoch starts, the main thread's side of each fetch,
    jitter), so that the unchanged inputs give back the measured step.
    """
    out = inp.changed(stretch_measured=1.0, loader_stretch_measured=1.0, threads_measured=inp.compute_threads)
    # Without the run_delay counter the workers' measured time off CPU (``load_blocked_s``) holds
    # both their wait for a core and their blocking: the fair share says how much of it was the
    # wait for a core (``loader_stretch - 1`` per CPU-second), never more than was measured.
    split = out.workers > 0 and not out.load_queue_measured and out.load_cpu_s > 0
    off_cpu_s = out.load_blocked_s
    # The measured compute stretch can only lower the model's: CPU counters cannot tell a thread
    # waiting for a core from one blocked in a read or a sleep, so a stretch above the model's is
    # not taken as contention.
    held = out.compute_stretch_cpu if out.workers > 0 and not out.gpu else None
    for rnd in range(CALIBRATION_ROUNDS):
        # The stretch depends on the step time, which depends on the stretch taken out: settle both
        # (and the split, which depends on the loader's stretch). Each round moves half way to the
        # new values: the undamped map oscillates between a compute-bound and an input-bound step.
        st = step_time(out)
        if held is not None:
            # Workers whose wake-ups wait for a core the compute holds take less of the compute's
            # cores than their fair-share runnable time says: hold the model to the measured stretch.
            own = _threads_wanted(out) + out.other_cores
            raw = (st.cores_wanted - own) / max(out.loader_compute_share, 1e-9)  # the loader's, unscaled
            room = max(0.0, max(1.0, held) * out.cores - own)
            share = min(1.0, room / raw) if raw > 1e-12 else 1.0
            if share != out.loader_compute_share:
                out = out.changed(loader_compute_share=share)
                st = step_time(out)
        w = 1.0 if rnd == 0 else 0.5
        out = out.changed(stretch_measured=out.stretch_measured + w * (st.stretch - out.stretch_measured),
                          loader_stretch_measured=out.loader_stretch_measured
                          + w * (st.loader_stretch - out.loader_stretch_measured))
        if split:
            queue = min(off_cpu_s / out.load_cpu_s, out.loader_stretch_measured - 1.0)
            out = out.changed(load_queue_per_cpu=queue, load_blocked_s=off_cpu_s - queue * out.load_cpu_s)
    out = out.changed(load_queue_measured=True) if split else out
    if out.workers > 0:
        # The part of the measured wait the workers' steady output does not explain is exposed wait.
        gap = min(sum(out.phases_s.values()) - step_time(out).step_s, out.phases_s.get("data_wait", 0.0))
        if gap > 0:
            out = out.changed(wait_exposed_s=gap)
    return out


class ModelEstimate(float):
    """An ``est_speedup`` priced by the model: the float itself, carrying the inputs before and after
    the fix and the measured step it was matched to, so that several fixes can be composed
    (:func:`compose`). Arithmetic on it gives a plain float, so a rule that reshapes an estimate
    drops the inputs and its fix is left out of a composition rather than composed wrongly."""

    before: StepInputs
    after: StepInputs
    measured_step_s: float

    def __new__(cls, value: float, before: StepInputs, after: StepInputs, measured_step_s: float) -> "ModelEstimate":
        obj = super().__new__(cls, value)
        obj.before, obj.after, obj.measured_step_s = before, after, measured_step_s
        return obj


def estimate(before: StepInputs, after: StepInputs, measured_step_s: float) -> float:
    """``est_speedup`` of a fix: samples/s after over before, the model matched to the measured step.

    The remainder of the measured step the model does not explain is kept in both; where the model
    explains more than was measured, its steps are scaled down to the measurement instead.
    """
    t_before = step_time(before).step_s
    t_after = step_time(after).step_s
    if t_before <= 0 or t_after <= 0:
        return 1.0
    measured = measured_step_s if measured_step_s > 0 else t_before
    rest = measured - t_before
    t_after_matched = t_after + rest if rest >= 0 else t_after * measured / t_before
    per_sample_gain = after.batch_scale / max(before.batch_scale, 1e-9)
    return ModelEstimate(max(1.0, measured / max(t_after_matched, 1e-12) * per_sample_gain), before, after, measured)


# Inputs that describe the calibration, not the job: a fix never changes them.
_CALIBRATION_FIELDS = ("stretch_measured", "threads_measured", "loader_stretch_measured", "compute_stretch_cpu",
                       "loader_compute_share")


def compose(base: StepInputs, fixes: "list[tuple[StepInputs, StepInputs]]") -> StepInputs:
    """``base`` with several fixes applied together, each given as its (before, after) inputs.

    What a fix changes is read as a change, so fixes on different inputs compose and fixes on the
    same one add up: a phase's seconds (and any other ``*_s`` input) lose each fix's saving, never
    below zero; a phase's speed factor is multiplied by each fix's factor; any other input (cores,
    threads, workers, batch scale, ...) takes the value the fix sets, the later fix winning, so
    callers pass the largest estimate last.
    """
    out = base
    for before, after in fixes:
        updates: dict[str, object] = {}
        for f in dataclasses.fields(StepInputs):
            name = f.name
            was, now = getattr(before, name), getattr(after, name)
            if name in _CALIBRATION_FIELDS or was == now:
                continue
            current = getattr(out, name)
            if name == "phases_s":
                merged = dict(current)
                for phase in set(was) | set(now):
                    delta = now.get(phase, 0.0) - was.get(phase, 0.0)
                    merged[phase] = max(0.0, merged.get(phase, 0.0) + delta)
                updates[name] = merged
            elif name == "phase_speed":
                merged = dict(current)
                for phase in set(was) | set(now):
                    merged[phase] = merged.get(phase, 1.0) * now.get(phase, 1.0) / max(was.get(phase, 1.0), 1e-12)
                updates[name] = merged
            elif name.endswith("_s") and isinstance(now, float) and isinstance(was, float) and current is not None:
                updates[name] = max(0.0, current + now - was)
            else:
                updates[name] = now
        out = out.changed(**updates)
    return out


def without_phase_time(inp: StepInputs, saved_s: dict[str, float]) -> StepInputs:
    """The inputs with ``saved_s`` seconds taken off each named phase (a fix that removes work:
    a stall, a sync wait, Python in the loop, a slower copy).

    The data wait is not an input but what the loader leaves: time saved there comes off the
    loading (the main thread's extra, then blocked, then CPU time; with workers, the exposed wait,
    then the blocked time of each batch, which the workers share). Time saved in forward and
    backward takes its share of ``serial_s`` with it (serial_s is counted on those two phases): a
    loop's autograd nodes that backward replays one tiny op at a time are serial work, and the
    fix that removes them removes that serial time.
    """
    phases = dict(inp.phases_s)
    out = inp
    for phase, saved in saved_s.items():
        saved = max(saved, 0.0)
        if phase != "data_wait":
            phases[phase] = max(0.0, phases.get(phase, 0.0) - saved)
            continue
        if inp.workers > 0:
            exposed = min(out.wait_exposed_s, saved)
            out = out.changed(wait_exposed_s=out.wait_exposed_s - exposed,
                              load_blocked_s=max(0.0, out.load_blocked_s - (saved - exposed) * inp.workers))
            continue
        extra = min(out.load_extra_s, saved)
        blocked = min(out.load_blocked_s, saved - extra)
        cpu = min(out.load_cpu_s, saved - extra - blocked)
        out = out.changed(load_extra_s=out.load_extra_s - extra, load_blocked_s=out.load_blocked_s - blocked,
                          load_cpu_s=out.load_cpu_s - cpu)
    counted = ("forward", "backward")
    before = sum(inp.phases_s.get(p, 0.0) for p in counted)
    after = sum(phases.get(p, 0.0) for p in counted)
    if before > 0 and after < before:
        out = out.changed(serial_s=out.serial_s * after / before)
    return out.changed(phases_s=phases)


# --- the single-phase forms most findings need ------------------------------------------------------


def speedup(t_s: float, t_new_s: float) -> float:
    """``T / T'``, never below 1.0 (a fix is not estimated to slow the step) and 1.0 when undefined."""
    if t_s <= 0 or t_new_s <= 0:
        return 1.0
    return max(1.0, t_s / t_new_s)


def phase_s(summary: StepSummary, phase: str) -> float:
    """A phase's seconds in a median step: its time-weighted share times the median step time.

    Shares add up to 1, so phases computed this way add up to the median step: estimates that
    shrink one phase stay consistent with ``T`` being the median.
    """
    return summary.breakdown.get(phase, 0.0) * summary.step_time_median_s
