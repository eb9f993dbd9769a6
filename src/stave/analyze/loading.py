"""Is the step waiting for its input, and is the loading blocked on I/O or short of CPU?

Joins the steps (how long a step waits in ``next()`` on the loader), the pipeline summary (what
one sample costs the workers, on-CPU and off) and the host summary (how busy the machine is) into
the numbers the input-pipeline findings and their what-if estimates need.

The step statistic is the *mean* over the counted steps that are not outliers and not the first
steps of an epoch with freshly started workers. With several workers the wait alternates (one
step gets a ready batch, the next waits for a late one), so a median would hide it; stalls from
checkpoints and worker start-up are other findings'.

Off-CPU time of a worker is either *blocked* (waiting for a read, sleeping, a lock) or *runnable
but waiting for a core*. The scheduler's ``run_delay`` counter measures the second directly. Where
it is hidden, the machine's run queue bounds it: with R runnable threads on C cores a fair
scheduler gives a runnable thread at least C/R of a core, so its wait for a core is at most
``cpu x (R/C - 1)``; whatever off-CPU time exceeds that bound was blocked.
"""

from __future__ import annotations

from dataclasses import dataclass

from stave.analyze.breakdown import StepSummary
from stave.analyze.host import HostSummary
from stave.analyze.outliers import find_outliers, stall_limit
from stave.analyze.stats import median
from stave.analyze.pipeline import PipelineSummary, summarize_pipeline
from stave.measure.config import LoaderInfo
from stave.measure.record import RunRecord

# The machine counts as CPU-saturated above this share of all usable cores busy: the scheduler
# then queues runnable threads, so a worker's off-CPU time may be queueing rather than I/O.
MACHINE_SATURATED_PCT = 90.0


def epoch_start_steps(record: RunRecord) -> set[int]:
    """Counted steps whose batches came from workers started for a new epoch (non-persistent).

    Each ``iter(loader)`` after the first starts fresh workers, and the first batch of each of
    them (up to one less than the steps of an epoch) waits for its start-up. Which counted steps
    those are is not recorded, but they are the ones that waited longest for data, so that many of
    the longest data waits are taken.
    """
    counted = record.counted_steps()
    if len(counted) < 2 or not record.steps:
        return set()
    n = 0
    for loader in record.config.loaders:
        restarts = loader.iterators_created - 1
        if loader.num_workers == 0 or loader.persistent_workers or restarts < 1:
            continue
        steps_per_epoch = len(record.steps) / loader.iterators_created
        fresh = min(loader.num_workers, max(1, int(steps_per_epoch) - 1))
        n += epoch_starts_counted(record, loader) * fresh
    n = min(n, len(counted) - 1)
    by_wait = sorted(counted, key=lambda s: s.data_wait_ns, reverse=True)
    return {s.index for s in by_wait[:n]}


def epoch_starts_counted(record: RunRecord, loader: LoaderInfo) -> int:
    """How many of ``loader``'s epoch starts (iterators after the first) fall in the counted steps:
    the restarts in proportion to the counted share of all steps (which steps they were is not
    recorded)."""
    if not record.steps:
        return 0
    restarts = max(0, loader.iterators_created - 1)
    return round(restarts * len(record.counted_steps()) / len(record.steps))


def main_process_wait_stalls(record: RunRecord) -> dict[int, float]:
    """Per counted step, the data wait beyond the typical one where a main-process loader stalled.

    Loading in the main process fetches each step's batch in that step, so its wait is steady; one
    that exceeds the median wait by as much as STEP_OUTLIERS asks of a stalled phase (half a median
    step, and 5 scaled MADs) is a stall (a garbage collection, a burst of page-cache misses), not
    what the loading costs: measured, one 158 ms fetch among 0.9 ms ones made a healthy loop's
    loading read 45 us a sample instead of 3. Its excess over the median wait is the stall. With
    workers a long wait is the pipeline itself (every other step may wait for a whole batch): none.
    """
    pipe = summarize_pipeline(record)
    counted = record.counted_steps()
    if pipe is None or not pipe.in_main_process or len(counted) < 3:
        return {}
    waits = [s.data_wait_ns / 1e9 for s in counted]
    med, limit = stall_limit(waits, median([s.duration_ns / 1e9 for s in counted]))
    return {s.index: w - med for s, w in zip(counted, waits) if w > limit}


def main_loading_kept_share(record: RunRecord, stalls: dict[int, float] | None = None) -> float:
    """The share of a main-process loader's measured data wait that is not in stalls (1 without
    stalls, or with workers): what its per-sample loading times are scaled by. ``stalls``: the
    record's :func:`main_process_wait_stalls`, where the caller has them."""
    stalls = main_process_wait_stalls(record) if stalls is None else stalls
    if not stalls:
        return 1.0
    total = sum(s.data_wait_ns for s in record.counted_steps()) / 1e9
    return max(0.0, total - sum(stalls.values())) / total if total > 0 else 1.0


def usable_cores(record: RunRecord) -> int:
    """Cores the job may use (affinity/cgroup), from the snapshot or the run header; at least 1."""
    return max(1, record.config.cores_usable or record.run.cores_usable or 1)


@dataclass
class LoadingBound:
    """The input pipeline against the step (seconds per steady step unless named otherwise).

    ``step_s`` / ``data_wait_s``: means over the counted steps that are not outliers.
    ``compute_wall_s``: the step without its data wait (what loading must hide behind).
    ``compute_cpu_s``: CPU-seconds the main process spends per step outside loading; measured
    from the monitor when ``compute_cpu_measured`` (at most its torch threads over
    ``compute_wall_s``), else assumed to keep its torch threads busy.
    ``load_wall_s`` / ``load_cpu_s``: one step's samples loaded by one worker.
    ``cores``: usable cores (affinity); ``cores_available``: of those, what the other processes on
    the machine left to the job while it ran (all of them when that is not measured).
    ``queue_share``: share of loading time spent waiting for a core (measured, or its upper
    bound from the run queue when ``queue_share_is_bound``); ``blocked_share``: the rest of the
    off-CPU time, ``None`` when neither counter exists and the machine may be saturated.
    """

    pipeline: PipelineSummary
    step_s: float
    data_wait_s: float
    steady_steps: int
    compute_wall_s: float
    compute_cpu_s: float
    compute_cpu_measured: bool
    load_wall_s: float
    load_cpu_s: float
    cores: int
    cores_available: float
    workers: int
    machine_saturated: bool | None
    cpu_share: float
    queue_share: float | None
    queue_share_is_bound: bool
    blocked_share: float | None

    @property
    def data_wait_share(self) -> float:
        """The steady data wait as a share of the steady step."""
        return self.data_wait_s / self.step_s if self.step_s > 0 else 0.0


def _queue_and_blocked(
    pipe: PipelineSummary, host: HostSummary, cores: int, cpu_share: float
) -> tuple[float | None, bool, float | None]:
    """(queue share, whether it is an upper bound, blocked share) of the loading time."""
    off_cpu = max(0.0, 1.0 - cpu_share)
    if pipe.run_delay_s_per_sample is not None and pipe.wall_s_per_sample > 0:
        queue = min(off_cpu, pipe.run_delay_s_per_sample / pipe.wall_s_per_sample)
        return queue, False, off_cpu - queue
    if host.procs_running is not None:
        # Fair scheduling: a runnable thread waits at most (R/C - 1) x its own CPU time for a core.
        queue = min(off_cpu, cpu_share * max(0.0, host.procs_running / cores - 1.0))
        return queue, True, off_cpu - queue
    saturated = None if host.cpu_system_pct is None else host.cpu_system_pct >= MACHINE_SATURATED_PCT
    if saturated is False:
        return 0.0, True, off_cpu
    return None, True, None


def loading_bound(record: RunRecord, summary: StepSummary, host: HostSummary) -> LoadingBound | None:
    """The numbers above, or ``None`` when no step was counted or no loader reported its workers."""
    pipe = summarize_pipeline(record)
    if pipe is None or summary.steps == 0:
        return None
    # Epoch starts (worker start-up) and stalls (checkpoints) are other findings' business. A
    # stall's step is kept, less its stalled phases' excess: its data wait is still the pipeline's
    # (with two workers every other step waits for a whole batch, and the stalls of a busy main
    # process fall on those steps as often as on any: dropping the steps dropped the waits).
    starts = epoch_start_steps(record)
    stalls = find_outliers(record.steps).excess_by_step_s
    wait_stalls = main_process_wait_stalls(record)
    steady = [s for s in record.counted_steps() if s.index not in starts] or record.counted_steps()
    t = sum(s.duration_ns / 1e9 - stalls.get(s.index, 0.0) - wait_stalls.get(s.index, 0.0)
            for s in steady) / len(steady)
    if t <= 0:
        return None
    raw_wait = sum(s.data_wait_ns for s in steady) / 1e9
    steady_wait = raw_wait - sum(wait_stalls.get(s.index, 0.0) for s in steady)
    wait = min(steady_wait / len(steady), t)
    samples_per_step = sum(s.samples for s in steady) / len(steady) or float(pipe.loader.batch_size or 1)
    # A main-process loader's stalled fetches are in its per-sample times as in its waits.
    kept = main_loading_kept_share(record, wait_stalls)
    load_wall = pipe.wall_s_per_sample * samples_per_step * kept
    load_cpu = pipe.cpu_s_per_sample * samples_per_step * kept
    cores = usable_cores(record)
    compute_wall = max(t - wait, 0.0)
    measured = host.cpu_main_pct is not None
    # The compute phases cannot use more CPU than their threads over their own duration.
    compute_cpu_most = compute_wall * min(record.config.torch_threads or cores, cores)
    if host.cpu_main_pct is not None:
        main_cpu = host.cpu_main_pct / 100.0 * t
        # Capped: idle OpenMP team threads spin-wait (libgomp, MKL) between parallel regions, and
        # with per-sample tensor ops in main-process loading they never stop spinning: a core's
        # worth of process CPU that is no demand of the compute and goes when the loading leaves.
        compute_cpu = min(max(main_cpu - (load_cpu if pipe.in_main_process else 0.0), 0.0), compute_cpu_most)
    else:
        compute_cpu = compute_cpu_most
    cpu_share = min(1.0, pipe.cpu_s_per_sample / pipe.wall_s_per_sample) if pipe.wall_s_per_sample > 0 else 0.0
    queue, is_bound, blocked = _queue_and_blocked(pipe, host, cores, cpu_share)
    available = float(cores)
    if host.other_processes_cores is not None:
        total = record.run.cores_total or record.config.cores_total or cores
        available = max(1.0, min(float(cores), total - host.other_processes_cores))
    return LoadingBound(
        pipeline=pipe,
        step_s=t,
        data_wait_s=wait,
        steady_steps=len(steady),
        compute_wall_s=compute_wall,
        compute_cpu_s=compute_cpu,
        compute_cpu_measured=measured,
        load_wall_s=load_wall,
        load_cpu_s=load_cpu,
        cores=cores,
        cores_available=available,
        workers=pipe.loader.num_workers,
        machine_saturated=None if host.cpu_system_pct is None else host.cpu_system_pct >= MACHINE_SATURATED_PCT,
        cpu_share=cpu_share,
        queue_share=queue,
        queue_share_is_bound=is_bound,
        blocked_share=blocked,
    )
