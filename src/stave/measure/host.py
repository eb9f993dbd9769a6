"""Machine samples taken by the monitor thread (~10 Hz)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence


@dataclass
class HostSample:
    """One reading of the machine. ``None`` means the counter is absent here, not zero.

    CPU percentages of processes are in "percent of one core" (200 = two cores busy); machine-wide
    percentages are 0-100 over all usable cores. Rates are over the interval since the last sample.
    """

    t_ns: int
    cpu_main_pct: float | None = None
    cpu_workers_pct: float | None = None
    # Other descendants of the main process (not DataLoader workers): compile workers, subprocesses.
    cpu_children_pct: float | None = None
    # The same job's other processes on this node, outside this process's tree: the other local
    # ranks of a multi-process run and their launcher (torchrun's agent). Not "other processes".
    cpu_job_ranks_pct: float | None = None
    workers_alive: int | None = None
    main_threads: int | None = None
    cpu_system_pct: float | None = None
    # Share of the usable cores' time the hypervisor gave to other guests (steal), percent.
    cpu_steal_pct: float | None = None
    iowait_pct: float | None = None
    procs_running: int | None = None
    disk_read_bytes_per_s: float | None = None
    ctx_voluntary_per_s: float | None = None
    ctx_involuntary_per_s: float | None = None
    rss_bytes: int | None = None
    mem_available_bytes: int | None = None
    page_cache_bytes: int | None = None
    swap_in_bytes_per_s: float | None = None
    swap_out_bytes_per_s: float | None = None
    psi_cpu_some_pct: float | None = None
    psi_memory_some_pct: float | None = None
    psi_io_some_pct: float | None = None
    gpu_util_pct: float | None = None
    gpu_mem_used_bytes: int | None = None
    gpu_power_w: float | None = None
    cuda_allocated_bytes: int | None = None
    cuda_peak_bytes: int | None = None
    step: int = -1


# Other processes must hold this many cores' worth of the job's usable cores for the machine to count
# as busy: a quarter of a core is the background of any machine (the monitor, the shell, kernel
# threads); beyond it another job's work is running on the cores the measurement assumed were the
# job's (MACHINE_BUSY's threshold, and the post-run probes' cue to time the pool at the cores left).
MACHINE_BUSY_MIN_CORES = 0.25
# Other processes' cores are the median over at least three sampler windows: a median of three
# outvotes one disturbed window; fewer say nothing.
MIN_OTHER_CORES_SAMPLES = 3


def _other_cores_raw(sample: HostSample, cores_total: int) -> float | None:
    if sample.cpu_system_pct is None or sample.cpu_main_pct is None:
        return None
    own = sample.cpu_main_pct + (sample.cpu_workers_pct or 0.0) + (sample.cpu_children_pct or 0.0)
    held = sample.cpu_system_pct + (sample.cpu_steal_pct or 0.0)
    return min(100.0, held) / 100.0 * cores_total - own / 100.0


def other_cores(sample: HostSample, cores_total: int) -> float | None:
    """Cores busy with processes outside this process's tree in one sample: machine busy minus the
    trainer's own tree, plus the hypervisor's steal (on a VM, other guests ran on these cores: the
    job could not). The job's other ranks on the node are among them (``cpu_job_ranks_pct``)."""
    raw = _other_cores_raw(sample, cores_total)
    return None if raw is None else max(0.0, raw)


def other_cores_series(samples: Sequence[HostSample], cores_total: int) -> list[float | None]:
    """:func:`other_cores` of each sample, with the job's CPU that was counted late carried back.

    A child's CPU reaches the job's counters when the monitor's once-a-second scan first sees the
    child, or when it exits and its parent reaps it. torch.compile runs a C++ compiler for each
    kernel, 1-4 s of one core in a process that often lives between two scans: until it is reaped
    its core reads as another process's, then one reading shows the job using more CPU than the
    machine was busy (a quiet 2-core EPYC read 1.0 core of "other processes" in most readings of a
    compiling run, and 5-7 cores in single readings: a false MACHINE_BUSY). So a reading's excess
    of the job's CPU over the machine's busy time is the job's CPU of the readings before it, and
    fills their "other" back (newest first; in core-seconds, each reading over its own interval).
    The sampler's jitter (the process and machine counters read a moment apart) moves CPU between
    neighbouring readings the same way, and is undone the same way.
    """
    raw = [_other_cores_raw(s, cores_total) for s in samples]
    gaps = [(b.t_ns - a.t_ns) / 1e9 for a, b in zip(samples, samples[1:])]
    positive = sorted(g for g in gaps if g > 0)
    typical_s = positive[len(positive) // 2] if positive else 0.1
    out: list[float | None] = [None] * len(samples)
    carry_core_s = 0.0  # the job's CPU read later than it ran, still to place (<= 0)
    for i in range(len(samples) - 1, -1, -1):
        value = raw[i]
        if value is None:
            continue
        interval_s = gaps[i - 1] if i > 0 and gaps[i - 1] > 0 else typical_s
        value += carry_core_s / interval_s
        carry_core_s = min(0.0, value) * interval_s
        out[i] = max(0.0, value)
    return out


def other_cores_of(readings: Sequence[HostSample], cores_total: int,
                   among: Sequence[HostSample] | None = None) -> list[float | None]:
    """:func:`other_cores_series` of ``readings`` (one value each, ``None`` where unknown), carried
    back over ``among`` (the run's whole sample list, of which ``readings`` is a part; default
    ``readings`` itself)."""
    series = list(among) if among is not None else list(readings)
    by_id = {id(s): v for s, v in zip(series, other_cores_series(series, cores_total))}
    return [by_id[id(s)] if id(s) in by_id else other_cores(s, cores_total) for s in readings]


def other_cores_readings(samples: list[HostSample], counted: set[int]) -> list[HostSample]:
    """The readings that tell what other processes held while the loop ran: those taken inside the
    counted steps, where there are :data:`MIN_OTHER_CORES_SAMPLES` of them. A short run has fewer
    (ten steps of 2 ms fit inside one ~0.1 s window, and beside a busy loop a batch-2 MLP's fifteen
    steps left one reading: the machine looked idle and MACHINE_BUSY went unnamed); then the
    readings of the warm-up and counted steps, but for the loop's first (its start-up's edge). None
    after the last counted step: the doctor's probes run there, in a child process that reads as
    another process."""
    inside = [s for s in samples if s.step in counted]
    if len(inside) >= MIN_OTHER_CORES_SAMPLES or not counted:
        return inside
    last = max(counted)
    return [s for s in samples if 0 <= s.step <= last][1:]


def outside_job_cores(samples: Sequence[HostSample], cores_total: int, cores_usable: int,
                      among: Sequence[HostSample] | None = None) -> float | None:
    """Median cores that processes outside the job held on the cores it may use, over ``samples``
    (the counted steps'; ``among``: the run's whole sample list, see :func:`other_cores_of`):
    other processes fill the cores the job may not use first, and the job's other ranks on the node
    are the job. ``None`` with fewer than three readings (the first and last windows alone cannot
    tell another process from the job's own start and end): pass :func:`other_cores_readings`."""
    values = [held - (s.cpu_job_ranks_pct or 0.0) / 100.0
              for s, held in zip(samples, other_cores_of(samples, cores_total, among)) if held is not None]
    if len(values) < MIN_OTHER_CORES_SAMPLES:
        return None
    return max(0.0, statistics.median(values) - max(0, cores_total - cores_usable))
