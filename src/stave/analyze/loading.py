"""Is the step waiting for its input, and is the loading blocked on I/O or short of CPU?

Joins the step summary (how long the median step waits in ``next()`` on the loader), the pipeline
summary (what one sample costs the workers, on-CPU and off) and the host summary (is the machine
saturated) into the numbers the input-pipeline findings and their what-if estimates need.

Off-CPU time of a worker is either *blocked* (waiting for a read, sleeping, a lock) or *runnable
but waiting for a core*. The scheduler's ``run_delay`` counter measures the second directly; where
it is hidden and the machine is saturated, off-CPU time cannot be called I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from stave.analyze.breakdown import StepSummary
from stave.analyze.host import HostSummary
from stave.analyze.pipeline import PipelineSummary, summarize_pipeline
from stave.measure.record import RunRecord

# The machine counts as CPU-saturated above this share of all usable cores busy: the scheduler
# then queues runnable threads, so a worker's off-CPU time may be queueing rather than I/O.
MACHINE_SATURATED_PCT = 90.0


def usable_cores(record: RunRecord) -> int:
    """Cores the job may use (affinity/cgroup), from the snapshot or the run header; at least 1."""
    return max(1, record.config.cores_usable or record.run.cores_usable or 1)


@dataclass
class LoadingBound:
    """The input pipeline against the step (seconds per median step unless named otherwise).

    ``compute_wall_s``: the median step without its data wait (what loading must hide behind).
    ``compute_cpu_s``: CPU-seconds the main process spends per step outside loading; measured
    from the monitor when ``compute_cpu_measured``, else assumed to keep its torch threads busy.
    ``load_wall_s`` / ``load_cpu_s``: one step's samples loaded by one worker.
    ``blocked_share``: share of loading time blocked (off-CPU and not queueing for a core);
    ``None`` when that cannot be told apart (saturated machine, no ``run_delay`` counter).
    """

    pipeline: PipelineSummary
    step_s: float
    data_wait_s: float
    compute_wall_s: float
    compute_cpu_s: float
    compute_cpu_measured: bool
    load_wall_s: float
    load_cpu_s: float
    cores: int
    workers: int
    machine_saturated: bool | None
    cpu_share: float
    run_delay_share: float | None
    blocked_share: float | None

    @property
    def data_wait_share(self) -> float:
        """The median data wait as a share of the median step."""
        return self.data_wait_s / self.step_s if self.step_s > 0 else 0.0


def loading_bound(record: RunRecord, summary: StepSummary, host: HostSummary) -> LoadingBound | None:
    """The numbers above, or ``None`` when no step was counted or no loader reported its workers."""
    pipe = summarize_pipeline(record)
    if pipe is None or summary.steps == 0 or summary.step_time_median_s <= 0:
        return None
    t = summary.step_time_median_s
    # The median wait, not the mean: the first batch of each epoch (worker start-up) is another
    # finding's business, and the steady wait is what more workers or cheaper loading remove.
    wait = min(summary.phase_median_s.get("data_wait", 0.0), t)
    samples_per_step = summary.samples_per_step or float(pipe.loader.batch_size or 1)
    load_wall = pipe.wall_s_per_sample * samples_per_step
    load_cpu = pipe.cpu_s_per_sample * samples_per_step
    cores = usable_cores(record)
    compute_wall = max(t - wait, 0.0)
    measured = host.cpu_main_pct is not None
    if host.cpu_main_pct is not None:
        main_cpu = host.cpu_main_pct / 100.0 * t
        compute_cpu = max(main_cpu - (load_cpu if pipe.in_main_process else 0.0), 0.0)
    else:
        threads = record.config.torch_threads or 1
        compute_cpu = compute_wall * min(threads, cores)
    saturated = None if host.cpu_system_pct is None else host.cpu_system_pct >= MACHINE_SATURATED_PCT
    cpu_share = min(1.0, pipe.cpu_s_per_sample / pipe.wall_s_per_sample) if pipe.wall_s_per_sample > 0 else 0.0
    delay_share: float | None = None
    blocked: float | None
    if pipe.run_delay_s_per_sample is not None and pipe.wall_s_per_sample > 0:
        delay_share = min(1.0 - cpu_share, pipe.run_delay_s_per_sample / pipe.wall_s_per_sample)
        blocked = max(0.0, 1.0 - cpu_share - delay_share)
    elif saturated is False:
        blocked = max(0.0, 1.0 - cpu_share)
    else:
        # Saturated, or saturation unknown: off-CPU time may be queueing for a core, not I/O.
        blocked = None
    return LoadingBound(
        pipeline=pipe,
        step_s=t,
        data_wait_s=wait,
        compute_wall_s=compute_wall,
        compute_cpu_s=compute_cpu,
        compute_cpu_measured=measured,
        load_wall_s=load_wall,
        load_cpu_s=load_cpu,
        cores=cores,
        workers=pipe.loader.num_workers,
        machine_saturated=saturated,
        cpu_share=cpu_share,
        run_delay_share=delay_share,
        blocked_share=blocked,
    )
