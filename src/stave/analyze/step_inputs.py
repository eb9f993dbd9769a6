"""The step model's inputs, read from one process's measurements.

Joins the step summary (phases), the host summary (the process tree's CPU and the machine's), the
input pipeline (loader CPU per sample) and the probes (per-op cost, the thread probe) into the
:class:`~stave.analyze.step_model.StepInputs` every finding's estimate starts from. Nothing here
estimates a fix; a rule changes the inputs and asks the model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from stave.analyze.breakdown import StepSummary, summarize_steps
from stave.analyze.host import HostSummary, summarize_host
from stave.analyze.loading import main_loading_kept_share, usable_cores
from stave.analyze.pipeline import summarize_pipeline
from stave.analyze.step_model import COMPUTE_PHASES, StepInputs, calibrated, contention_factor
from stave.measure.host import MACHINE_BUSY_MIN_CORES
from stave.measure.config import PRODUCT
from stave.measure.record import RunRecord
from stave.measure.steps import StepRecord

# Above this share of the usable cores busy the machine was saturated: the trainer's threads could
# not all run, so their measured CPU understates what they want and the configured count is used.
SATURATED_SHARE = 0.9
# A pinned copy reads and writes every byte once on one core; a core's memcpy bandwidth is of this
# order (DRAM and cache, 5-20 GB/s on current servers); the low end keeps the pin cost an upper bound.
PIN_COPY_BYTES_PER_S = 5e9
# An op too small for its size to matter costs at most ten bare dispatches: the dispatch, its
# autograd node, the module call and the backward counterpart are a few (SMALL_BATCH's op-bound test,
# and the ceiling on such ops beside busy processes: busy_op_bound_s).
OP_BOUND_MAX_DISPATCHES = 10.0
# A kernel occupies the GPU for about this long however little it computes (its blocks' start, the
# memory round trips of a tiny op, the end-of-kernel flush): the busy time of a step of tiny ops is
# its kernel count times this, whatever the batch. On a lent H200 (session 22) a 7-layer MLP at
# batch 16 kept the GPU busy 0.41 ms a step (NVML) over 189 ops, 2.2 us each; the shortest kernels
# of CUDA's own samples are about as long. One op may launch more than one kernel, so counting ops
# understates the fixed part, which keeps the batch-growth estimate on the cautious side.
GPU_KERNEL_MIN_S = 2e-6


@dataclass(frozen=True)
class MachineLoad:
    """The CPU budget of the run: who held the usable cores (cores' worth of CPU, medians).

    ``main_cores``: the trainer process (its threads, the pin thread); ``workers_cores``: loader
    workers; ``other_cores``: processes outside this process's tree on the cores it may use (they
    compete with it), of which ``job_ranks_cores`` are the same job's other ranks on this node (not
    another job: MACHINE_BUSY leaves them out) and ``steal_cores`` the hypervisor's steal (other
    guests of a VM on its cores); ``cores``: usable.
    ``compute_threads_busy``: the trainer's threads running during compute (measured CPU over the
    compute time), ``None`` when the CPU counters are absent.
    """

    cores: int
    cores_total: int
    torch_threads: int | None
    main_cores: float | None
    workers_cores: float | None
    other_cores: float | None
    machine_busy_share: float | None
    compute_threads_busy: float | None
    job_ranks_cores: float | None = None
    steal_cores: float | None = None

    @property
    def outside_job_cores(self) -> float | None:
        """Cores held by processes that are not this job's (``other_cores`` less its other ranks)."""
        if self.other_cores is None:
            return None
        return max(0.0, self.other_cores - (self.job_ranks_cores or 0.0))

    @property
    def saturated(self) -> bool:
        """The usable cores were (nearly) all busy."""
        return self.machine_busy_share is not None and self.machine_busy_share >= SATURATED_SHARE


def machine_load(record: RunRecord, summary: StepSummary, host: HostSummary | None = None) -> MachineLoad:
    """Who held the cores during the counted steps."""
    host = host or summarize_host(record)
    cores = usable_cores(record)
    total = max(cores, record.run.cores_total or record.config.cores_total or cores)
    other = None
    if host.other_processes_cores is not None:
        # Other processes fill the cores the job may not use first; only the rest competes with it.
        other = max(0.0, host.other_processes_cores - (total - cores))
    main = host.cpu_main_pct / 100.0 if host.cpu_main_pct is not None else None
    workers = host.cpu_workers_pct / 100.0 if host.cpu_workers_pct is not None else None
    busy_share = None
    if host.cpu_system_pct is not None:
        # Cores the hypervisor gave to other guests (steal) were as unavailable as busy ones.
        busy_share = min(1.0, (host.cpu_system_pct + (host.cpu_steal_pct or 0.0)) / 100.0 * total / cores)
        machine_cores = host.cpu_system_pct / 100.0 * total
        own = (main or 0.0) + (workers or 0.0)
        if own > machine_cores > 0:
            # The job cannot have used more CPU than the whole machine: per-process and machine
            # counters are read at slightly different instants; the machine's total bounds both.
            main = main * machine_cores / own if main is not None else None
            workers = workers * machine_cores / own if workers is not None else None
    threads_busy = None
    compute = sum(summary.phase_s(p) for p in COMPUTE_PHASES)
    step = summary.step_time_mean_s
    if main is not None and compute > 0 and step > 0:
        load_main = 0.0
        pipe = summarize_pipeline(record)
        if pipe is not None and pipe.in_main_process:
            load_main = pipe.cpu_s_per_sample * summary.samples_per_step
        threads_busy = max(0.0, main * step - load_main) / compute
        if record.config.torch_threads:
            threads_busy = min(threads_busy, float(record.config.torch_threads))
    return MachineLoad(cores, total, record.config.torch_threads, main, workers, other, busy_share, threads_busy,
                       host.job_ranks_cores, host.steal_cores)


def compute_cpu_cores(record: RunRecord) -> float | None:
    """Cores' worth of CPU the trainer process got while it computed: its CPU over the counted steps
    less its data waits, over their wall time less the data waits (the steps' own CPU readings,
    exact where the ~10 Hz host samples are a few windows). ``None`` where the steps carry no CPU
    reading, or on a GPU (the host's compute phases wait for the device there). Steps with an
    evaluation inside are left out: its CPU is not the training compute's."""
    if record.config.device_type == "cuda":
        return None
    cpu_ns = wall_ns = 0
    for step in record.counted_steps():
        if step.cpu_ns <= 0 or step.eval_ns > 0:
            continue
        cpu_ns += max(0, step.cpu_ns - step.data_wait_cpu_ns)
        wall_ns += max(0, step.duration_ns - step.data_wait_ns)
    return cpu_ns / wall_ns if wall_ns > 0 and cpu_ns > 0 else None


def load_thread_factor(record: RunRecord, load_cpu_s: float, threads: float) -> float:
    """Main-process loading: what a worker's one thread would spend on it over what the main thread did.

    The loading's stages are timed on the main thread's own CPU clock, yet torch ops in the
    transforms run on the intra-op pool beside it; a loader worker runs them on its one thread,
    doing the pool's share itself. The process's CPU during the data waits, less the pool's spin
    after the compute (the spin probe), is the loading's whole CPU; it over-counts the spin between
    the loading's own parallel ops, so the factor is an upper bound, at most the pool's threads. 1
    where the spin is unknown (then the pool's CPU in the wait may all be spin) or nothing was timed.
    """
    spin = record.probes.pool_spin_s
    if spin is None or load_cpu_s <= 0 or threads <= 1:
        return 1.0
    cpu_ns = wait_ns = steps = 0
    for step in record.counted_steps():
        if step.eval_ns > 0 or step.data_wait_ns <= 0:
            continue
        cpu_ns += step.data_wait_cpu_ns
        wait_ns += step.data_wait_ns
        steps += 1
    if not steps or cpu_ns <= 0:
        return 1.0
    wait_cpu = cpu_ns / 1e9 / steps
    spin_cpu = (threads - 1.0) * min(spin, wait_ns / 1e9 / steps)
    return min(threads, max(1.0, (wait_cpu - spin_cpu) / load_cpu_s))


def pool_wake_s(record: RunRecord, summary: StepSummary) -> float:
    """Seconds per step the run's forward spent waking the pool after its wait for data.

    The wake probe measured the first parallel op after a sleep as long as the run's median wait;
    the run shows it as forward time beyond its FLOPs at the backward's rate (the backward runs the
    same products, twice over, right after the forward with the pool awake). The smaller of the two
    is credited: the probe says what a wait costs on this machine, the forward that this run paid it.
    0 without the probe, without both phases' FLOPs, or when the run's forward shows no excess.
    """
    probe = record.probes.pool_wake_s
    if not probe or probe <= 0:
        return 0.0
    flops = record.config.flops_by_phase
    fwd_flops, bwd_flops = flops.get("forward", 0), flops.get("backward", 0)
    forward, backward = summary.phase_s("forward"), summary.phase_s("backward")
    if fwd_flops <= 0 or bwd_flops <= 0 or backward <= 0:
        return 0.0
    excess = forward - backward * fwd_flops / bwd_flops
    return max(0.0, min(probe, excess))


def fixed_and_serial_s(record: RunRecord, summary: StepSummary) -> tuple[float, float]:
    """(seconds per step that do not grow with the batch, seconds that run on one thread).

    Serial: each aten op pays a fixed host dispatch cost (the overhead probe) on the main thread,
    and some ops' work runs there too whatever the pool (random-number kernels such as dropout's
    mask, ops under ATen's parallel grain): their time in the counted step beyond that dispatch.
    Fixed: the dispatch plus the optimizer update (its size is the model's, not the batch's).
    """
    cfg = record.config
    phases = ("forward", "backward")
    compute = sum(summary.phase_s(p) for p in phases)
    overhead = record.probes.op_overhead_ns
    ops = sum(cfg.aten_ops_by_phase.get(p, 0) for p in phases)
    dispatch = min(compute, ops * overhead / 1e9) if overhead is not None and ops else 0.0
    serial_ops = sum(cfg.serial_ops_by_phase.get(p, 0) for p in phases)
    serial_work = max(0.0, sum(cfg.serial_op_s_by_phase.get(p, 0.0) for p in phases)
                      - serial_ops * (overhead or 0.0) / 1e9)
    return dispatch + summary.phase_s("optimizer"), min(compute, dispatch + serial_work)


def compute_threads(load: MachineLoad) -> float:
    """The trainer's threads the model counts: measured busy, or configured where the machine hid it."""
    configured = float(load.torch_threads or load.cores)
    # Threads beyond the cores cannot all show as busy, yet each wants a core: the configured count.
    if load.compute_threads_busy is None or load.saturated or configured > load.cores:
        return configured
    return max(1.0, min(configured, load.compute_threads_busy))


def oversubscription_penalty(record: RunRecord, summary: StepSummary, serial_s: float,
                             outside_cores: float | None = None) -> float:
    """The parallel compute's time at the script's thread count over at one thread per core.

    The thread probe timed the step's GEMMs and the elementwise ops on their outputs both ways. The
    GEMMs' share of the parallel compute is their counted FLOPs at the probes' rate; the rest is the
    memory-bound ops between them. Where the probe could not time the products (calls too slow in
    the oversized pool), their ratio and share come from the run's own op timing
    (:func:`counted_products_ratio`). Each part shrinks by its own ratio. Without the elementwise
    ratio or a rate, the GEMMs' ratio stands for all.
    """
    elem_ratio = record.probes.threads_elementwise_speedup
    clamp = outside_cores is not None and outside_cores < MACHINE_BUSY_MIN_CORES
    # On cores no other process uses, threads beyond the cores cannot do the same work faster
    # than one thread per core: the cores are the limit, extra threads add only switches and
    # barrier waits. A ratio below 1 there is the probe disturbed (the elementwise half read
    # 0.18, 2.4 and 0.78 on the same script in three runs on a quiet 2-core VM). Beside a busy
    # process it can be real: more threads win a larger share of the machine.
    return _pool_penalty(record, summary, serial_s, record.probes.threads_speedup, elem_ratio, clamp)


def busy_serial_s(record: RunRecord, serial_s: float) -> float:
    """The compute's seconds on one thread for the busy-pool pricing: ``serial_s`` (forward and
    backward's dispatch and serial kernels) plus the optimizer's and the rest of the step's ops
    under ATen's parallel grain; the optimizer's tiny per-parameter ops are most of its ops (66 of 92
    for a VAE's Adam).

    At most :data:`OP_BOUND_MAX_DISPATCHES` dispatches for each op the compute phases ran: an op
    under the grain does no work that could take longer, and those measured beside busy processes
    took far longer all the same, because some enter the pool at any size (log_softmax, nll_loss's
    backward, Adam's sqrt: :func:`busy_op_bound_s`) and wait at its barrier for the thread that
    shares a core with them. Their time beyond the bound is such waits, which the pool at the free
    cores does not pay: kept as one-thread time it made the step at the free cores 5-30x too long
    (timm_optimizer_unfused beside a busy loop: 0.65 s of 'serial' ops where 1,735 ops bound them at
    28 ms; its step 0.83 s at the free core, about 0.1 s alone at two threads), and the job's own
    findings vanished under it. (Random-number kernels over large tensors do real one-thread work
    above the bound; beside busy processes they are taken as the pool's.)"""
    by_phase = record.config.serial_op_s_by_phase
    serial = serial_s + sum(by_phase.get(p, 0.0) for p in COMPUTE_PHASES if p not in ("forward", "backward"))
    overhead = record.probes.op_overhead_ns
    ops = sum((record.config.aten_ops_by_phase or {}).get(p, 0) for p in COMPUTE_PHASES)
    if not overhead or overhead <= 0 or ops <= 0:
        return serial
    return min(serial, ops * OP_BOUND_MAX_DISPATCHES * overhead / 1e9)


def busy_pool_penalty(record: RunRecord, summary: StepSummary, serial_s: float) -> float | None:
    """Beside other busy processes: the parallel compute's time at the script's thread count over at
    the cores they left free (the busy-threads probe, and the run's own products against the rate
    timed at the free cores). A pool that fits the usable cores but not the free ones waits at each
    op's barrier for the thread that shares its core with another process. ``serial_s``: the
    compute's one-thread seconds (:func:`busy_serial_s`). ``None`` where not probed."""
    probes = record.probes
    if not probes.busy_threads_probe or (probes.busy_threads_speedup is None
                                         and probes.busy_threads_elementwise_speedup is None):
        return None
    # Products the probe could not time in its slice: the elementwise ops' ratio stands for them
    # (unless the run's own products' ratio, which _pool_penalty prefers when larger, is known).
    gemm = probes.busy_threads_speedup if probes.busy_threads_speedup is not None \
        else probes.busy_threads_elementwise_speedup
    return _pool_penalty(record, summary, serial_s, gemm, probes.busy_threads_elementwise_speedup, False)


def busy_pool_speed(record: RunRecord, summary: StepSummary, serial_s: float,
                    speeds: dict[str, float] | None = None) -> float | None:
    """How much faster the step's compute phases would run, all together, with the intra-op pool at
    the cores other busy processes left free, beside them (> 1): :func:`busy_phase_speeds` (or
    ``speeds``, already taken from it) over the compute's seconds. ``None`` where not probed or no
    faster."""
    speeds = speeds if speeds is not None else busy_phase_speeds(record, summary, serial_s)
    if speeds is None:
        return None
    before = sum(summary.phase_s(p) for p in COMPUTE_PHASES)
    after = sum(summary.phase_s(p) / speeds[p] for p in COMPUTE_PHASES)
    return before / after if 0 < after < before else None


def busy_phase_speeds(record: RunRecord, summary: StepSummary, serial_s: float) -> dict[str, float] | None:
    """Per compute phase, how much faster it would run (mean seconds) with the intra-op pool at the
    free cores beside the other busy processes: :func:`steps_at_free_cores` against the steps as
    measured. ``serial_s``: the step model's (``StepInputs.serial_s``). ``None`` where not probed or
    no faster."""
    steps = steps_at_free_cores(record, summary, serial_s)
    if steps is None:
        return None
    after = summarize_steps(steps)
    speeds = {p: (summary.phase_s(p) / after.phase_s(p) if after.phase_s(p) > 0 else 1.0) for p in COMPUTE_PHASES}
    return speeds if any(v > 1.0 for v in speeds.values()) else None


def steps_at_free_cores(record: RunRecord, summary: StepSummary, serial_s: float) -> list[StepRecord] | None:
    """The steps as they would run with the intra-op pool at the cores other busy processes
    left free, beside them, from :func:`busy_pool_penalty`: in each compute phase the one-thread part
    (:func:`busy_serial_s`) stays and the rest shrinks by the penalty; and no step's phase of ops too
    small for their size to matter takes longer than :func:`busy_op_bound_s` allows (step by step:
    the waits come and go, and a ratio of means would leave the slow steps slow). Data waits and
    evaluation as measured. ``None`` where not probed."""
    compute_s = sum(summary.phase_s(p) for p in COMPUTE_PHASES)
    serial = min(busy_serial_s(record, serial_s), compute_s)
    penalty = busy_pool_penalty(record, summary, serial)
    if penalty is None or compute_s <= 0:
        return None
    after_s = serial + (compute_s - serial) / max(1.0, penalty)
    common = compute_s / after_s if after_s > 0 else 1.0
    bounds_ns = {p: int(v * 1e9) for p, v in (busy_op_bound_s(record) or {}).items()}
    out = []
    for s in record.steps:
        phases = {}
        for p in COMPUTE_PHASES:
            ns = int(s.phase_ns(p) / common)
            phases[p] = min(ns, bounds_ns[p]) if p in bounds_ns else ns
        measured = {f"{p}_ns": v for p, v in phases.items() if p != "other"}
        out.append(dataclasses.replace(s, **measured,
                                       end_ns=s.start_ns + s.eval_ns + s.data_wait_ns + sum(phases.values())))
    return out


def busy_op_bound_s(record: RunRecord) -> dict[str, float] | None:
    """Per compute phase, its seconds with nothing to wait for where every op but the products touched
    fewer tensor elements than ATen's parallel grain: each op costs at most
    :data:`OP_BOUND_MAX_DISPATCHES` dispatches, the products their FLOPs at the rate timed at the free
    cores. Such ops do no work that could take longer; beside a busy process a pool larger than the
    free cores made them take far longer all the same (log_softmax, nll_loss's backward and Adam's
    sqrt enter the pool at any size: a batch-2 MLP's ops took 0.2-1.4 ms each beside one busy loop at
    2 threads, its step 10x longer than at 1 thread, which the probe's products and elementwise ops,
    1.0x and 2.2x, did not show). The time between the phases is left as it is: the user's Python
    runs there too. ``None`` where an op over the grain ran in a compute phase (its work can grow
    with the data) or the ops were not counted."""
    cfg = record.config
    overhead = record.probes.op_overhead_ns
    if cfg.large_ops_by_phase is None or overhead is None or overhead <= 0:
        return None
    if any(cfg.large_ops_by_phase.get(p, 0) for p in COMPUTE_PHASES):
        return None
    rate = record.probes.matmul_flops_per_s or record.probes.fp32_matmul_flops_per_s
    ops = cfg.aten_ops_by_phase or {}
    out = {}
    for p in COMPUTE_PHASES:
        flops = cfg.flops_by_phase.get(p, 0)
        # Between the phases the user's own Python runs beside the ops (a metric over a list, a
        # logging call): no op count bounds it.
        if p == "other" or ops.get(p, 0) <= 0 or (flops and not rate):
            continue
        out[p] = ops[p] * OP_BOUND_MAX_DISPATCHES * overhead / 1e9 + (flops / rate if flops else 0.0)
    return out


def _pool_penalty(record: RunRecord, summary: StepSummary, serial_s: float, probe_ratio: float | None,
                  elem_ratio: float | None, clamp: bool) -> float:
    """The parallel compute's time at the script's threads over at fewer (the probe's ratios for the
    products and the elementwise ops, or the run's own products' ratio where larger), each part of the
    compute shrinking by its own ratio; ``clamp``: no ratio below 1."""
    from_run = counted_products_ratio(record)
    # The probe times the products back to back, the pool kept awake between them. In a step, Python
    # runs between the ops, and libgomp lets an oversized pool's threads sleep after a short spin
    # (see step_model.compute_cores_wanted), so each op there first wakes them all on the few cores.
    # The run's own op-by-op timing paid that; where it says more than the probe, it is what the fix
    # removes (16 threads on 2 cores: the forward's products ran 13x slower per FLOP than the
    # backward's, which the autograd engine issues back to back; probe 1.35x, fix measured 3.9x).
    run_ratio = from_run[0] if from_run is not None else None
    use_run = run_ratio is not None and (probe_ratio is None or run_ratio > probe_ratio)
    gemm_ratio = run_ratio if use_run else probe_ratio
    if gemm_ratio is None:
        return 1.0
    if clamp:
        gemm_ratio = max(1.0, gemm_ratio)
        elem_ratio = max(1.0, elem_ratio) if elem_ratio is not None else None
    rate = record.probes.matmul_flops_per_s or record.probes.fp32_matmul_flops_per_s
    parallel = max(0.0, sum(summary.phase_s(p) for p in COMPUTE_PHASES) - serial_s)
    if elem_ratio is None or not rate or parallel <= 0 or gemm_ratio <= 0 or elem_ratio <= 0:
        return gemm_ratio
    if use_run and from_run is not None:  # (from_run is set whenever use_run: for the type checker)
        # The run timed its products op by op: their share of its ops' time splits the compute.
        gemm_s = parallel * from_run[1]
    else:
        # The rate is timed at no more threads than cores: these are the GEMMs' seconds there, not at
        # the script's count. Taking them to the script's count (times the GEMMs' ratio) lowered
        # oversubscription.py's estimate from 1.9x to 1.6x against 2.0-2.4x measured: its main-process
        # loading also slows in the oversized pool, which the model does not price, and this split
        # leaves more of the compute to the elementwise ratio, which stands in for it.
        gemm_s = min(parallel, sum(record.config.flops_by_phase.values()) / rate)
    rest_s = parallel - gemm_s
    return parallel / (gemm_s / gemm_ratio + rest_s / elem_ratio)


def counted_products_ratio(record: RunRecord) -> tuple[float, float] | None:
    """(The step's matrix products and convolutions at the script's threads over at one per core, the
    products' share of the step's op time), from the run itself: their time in the FLOP-counting step
    (timed op by op, at the script's threads) over their FLOPs at the rate probe's rate (timed at no
    more threads than cores). The thread probe's own convolution pairs may not fit its slice when an
    oversized pool makes a call slow (a bf16 convolution's backward ran 50x slower at 16 threads on 2
    cores): this is what stands in. Where the probe did time them, this is the larger of the two
    (:func:`oversubscription_penalty`): the probe's products ran back to back, these with the
    step's own work between them. ``None`` where either is missing, or the rate was timed at the
    script's thread count."""
    probes, cfg = record.probes, record.config
    rate, rate_threads = probes.matmul_flops_per_s, probes.matmul_rate_threads
    threads = cfg.torch_threads or 0
    if not rate or rate_threads is None or threads <= rate_threads:
        return None
    buckets = [b for phase, b in cfg.op_s_by_phase.items() if phase in COMPUTE_PHASES]
    product_s = sum(b.get(PRODUCT, 0.0) for b in buckets)
    op_s = sum(sum(b.values()) for b in buckets)
    flops = sum(v for k, v in cfg.flops_by_phase.items() if k in COMPUTE_PHASES)
    if product_s <= 0 or flops <= 0:
        return None
    return max(1.0, product_s / (flops / rate)), product_s / op_s


def delivery_s_per_step(record: RunRecord, summary: StepSummary) -> float | None:
    """Seconds per step a loader worker spends on delivering the step's batches beyond fetching and
    collating them (a fresh shared-memory block, the handle sent): the delivery probe's worker time
    less its main-process time, per batch of the run's shapes. ``None`` where it was not probed."""
    probes, batch = record.probes, record.config.batch
    if probes.delivery_worker_s is None or probes.delivery_main_s is None or not batch or not batch[0].shape:
        return None
    batches_per_step = summary.samples_per_step / max(1, batch[0].shape[0])
    return max(0.0, probes.delivery_worker_s - probes.delivery_main_s) * batches_per_step


def step_inputs(record: RunRecord, summary: StepSummary, host: HostSummary | None = None) -> StepInputs | None:
    """The model's inputs for this run (calibrated to its measured contention); ``None`` without steps."""
    if summary.steps == 0 or summary.step_time_mean_s <= 0:
        return None
    host = host or summarize_host(record)
    load = machine_load(record, summary, host)
    phases = {p: summary.phase_s(p) for p in ("data_wait", *COMPUTE_PHASES)}
    fixed, serial = fixed_and_serial_s(record, summary)
    pipe = summarize_pipeline(record)
    gpu = record.config.device_type == "cuda"
    workers, load_cpu, blocked, extra, queue = 0, 0.0, 0.0, 0.0, 0.0
    queue_measured = True
    pin = 0.0
    n = summary.samples_per_step
    if pipe is not None:
        workers = 0 if pipe.in_main_process else pipe.loader.num_workers
        # A main-process loader's stalled fetches (a garbage collection in one of them) are not what
        # its loading costs: they come out of its per-sample times and its mean wait alike.
        kept = main_loading_kept_share(record) if workers == 0 else 1.0
        if kept < 1.0:
            phases["data_wait"] *= kept
        load_cpu = pipe.cpu_s_per_sample * n * kept
        delay = pipe.run_delay_s_per_sample or 0.0
        queue_measured = pipe.run_delay_s_per_sample is not None
        blocked = max(0.0, pipe.wall_s_per_sample - pipe.cpu_s_per_sample - delay) * n * kept
        queue = min(delay, max(0.0, pipe.wall_s_per_sample - pipe.cpu_s_per_sample)) / pipe.cpu_s_per_sample \
            if pipe.cpu_s_per_sample > 0 else 0.0
        if workers == 0:
            extra = max(0.0, phases["data_wait"] - load_cpu * (1.0 + queue) - blocked)
        if pipe.loader.pin_memory and gpu:
            pin = sum(t.nbytes for t in record.config.batch) / PIN_COPY_BYTES_PER_S
    elif phases["data_wait"] > 0:
        # No worker reported: the wait is loading in the main thread, of unknown kind.
        extra = phases["data_wait"]
    probe_threads_cores = (record.probes.neighbour_probe or [0, 0])[:2]
    threads = compute_threads(load)
    got = compute_cpu_cores(record)
    # A pool that fits the cores wants its threads' cores the whole compute (they spin between
    # parallel regions); what it got is measured. A larger pool is THREAD_OVERSUBSCRIPTION's.
    stretch_cpu = threads / got if got and threads <= load.cores else None
    transfer = receive = 0.0
    probes = record.probes
    delivery = delivery_s_per_step(record, summary)
    if workers == 0 and pipe is not None and delivery is not None:
        # The delivery probe timed whole batches of the run's shapes (its first dimension's samples).
        batches_per_step = n / max(1, record.config.batch[0].shape[0])
        transfer = delivery
        receive = (probes.delivery_receive_s or 0.0) * batches_per_step
    elif workers == 0 and pipe is not None and probes.shm_collate_s_per_byte is not None:
        batch_bytes = sum(t.nbytes for t in record.config.batch)
        batches_per_step = n / max(1, pipe.loader.batch_size or n or 1)
        transfer = batch_bytes * batches_per_step * probes.shm_collate_s_per_byte
    inp = StepInputs(
        phases_s=phases,
        cores=float(load.cores),
        compute_threads=threads,
        compute_stretch_cpu=stretch_cpu,
        serial_s=serial,
        fixed_s=fixed,
        workers=workers,
        load_cpu_s=load_cpu,
        load_blocked_s=blocked,
        load_extra_s=extra,
        load_queue_per_cpu=queue,
        load_queue_measured=queue_measured,
        pin_cpu_s=pin,
        other_cores=load.other_cores or 0.0,
        oversubscription_penalty=oversubscription_penalty(record, summary, serial, load.outside_job_cores),
        contention_factor=contention_factor(record.probes.neighbour_stretch, *probe_threads_cores),
        transfer_cpu_s=transfer,
        receive_s=receive,
        pool_spin_s=record.probes.pool_spin_s,
        wake_s=pool_wake_s(record, summary) if not gpu else 0.0,
        wake_min_wait_s=record.probes.pool_wake_min_wait_s if record.probes.pool_wake_min_wait_s is not None
        else float("inf"),
        load_thread_factor=load_thread_factor(record, load_cpu, threads) if workers == 0 else 1.0,
        samples_per_step=n,
        gpu=gpu,
        # NVML's utilization is the share of time a kernel ran: the device's busy time per step.
        device_s=host.gpu_util_pct / 100.0 * summary.step_time_mean_s if gpu and host.gpu_util_pct is not None else None,
        device_fixed_s=(record.config.aten_ops_per_step or 0) * GPU_KERNEL_MIN_S if gpu else 0.0,
    )
    return calibrated(inp)
