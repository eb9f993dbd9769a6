"""The machine during the measured steps: medians of the monitor's samples, absent stays absent.

The monitor samples the machine at ~10 Hz. Rules want a few robust numbers out of that series
(how busy the CPU was, whether the process swapped, how fast the disk read) taken over the steps
that enter the statistics, so warm-up does not colour them. A counter the machine does not provide
is ``None`` in every sample and stays ``None`` here: absence is never turned into a zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from stave.analyze.gpu_util import gpu_util_window
from stave.analyze.stats import median
from stave.measure.host import MIN_OTHER_CORES_SAMPLES, HostSample, other_cores_of, other_cores_readings
from stave.measure.record import RunRecord

# A counter counts as "active" in a sample above this rate: a page or two swapped per second is
# the kernel's background housekeeping, not a process that does not fit in memory.
SWAP_ACTIVE_BYTES_PER_S = 64 * 1024


@dataclass
class HostSummary:
    """Robust numbers about the machine over the counted steps (``None``: counter absent).

    CPU percentages of processes are "percent of one core"; machine-wide ones are 0-100 over all
    cores; PSI values are the kernel's "some" share in percent. ``other_processes_cores``: cores
    kept busy by processes outside this process's tree (machine busy minus the trainer, its workers
    and children), the hypervisor's steal included (other guests on a VM's cores hold them just
    the same; ``steal_cores`` of them); ``job_ranks_cores``: of those, the same job's other ranks on this node and their
    launcher (a multi-process run; ``None`` otherwise).
    """

    samples: int = 0
    cpu_system_pct: float | None = None
    cpu_steal_pct: float | None = None
    cpu_main_pct: float | None = None
    cpu_workers_pct: float | None = None
    iowait_pct: float | None = None
    procs_running: float | None = None
    ctx_involuntary_per_s: float | None = None
    disk_read_bytes_per_s: float | None = None
    psi_cpu_some_pct: float | None = None
    psi_memory_some_pct: float | None = None
    psi_io_some_pct: float | None = None
    swap_in_bytes_per_s: float | None = None
    swap_out_bytes_per_s: float | None = None
    swap_active_share: float | None = None
    rss_peak_bytes: int | None = None
    mem_available_min_bytes: int | None = None
    page_cache_bytes: int | None = None
    gpu_util_pct: float | None = None
    disk_read_total_bytes: float | None = None
    other_processes_cores: float | None = None
    steal_cores: float | None = None
    job_ranks_cores: float | None = None


def samples_in_counted_steps(record: RunRecord) -> list[HostSample]:
    """Samples taken while a counted step ran; all samples taken during steps when none match.

    Warm-up steps allocate caches, start workers and compile kernels, so their samples describe
    start-up, not the steady state the findings are about.
    """
    counted = {s.index for s in record.counted_steps()}
    inside = [h for h in record.host if h.step in counted]
    if inside:
        return inside
    return [h for h in record.host if h.step >= 0]


def present(samples: Sequence[HostSample], get: Callable[[HostSample], float | int | None]) -> list[float]:
    """The values of one counter over the samples that have it."""
    out: list[float] = []
    for s in samples:
        value = get(s)
        if value is not None:
            out.append(float(value))
    return out


def _median_or_none(values: list[float]) -> float | None:
    return median(values) if values else None


def summarize_host(record: RunRecord) -> HostSummary:
    """Summarize the monitor's samples over the counted steps of ``record``."""
    samples = samples_in_counted_steps(record)
    out = HostSummary(samples=len(samples))
    if not samples:
        return out
    for name in (
        "cpu_system_pct",
        "cpu_steal_pct",
        "cpu_main_pct",
        "cpu_workers_pct",
        "iowait_pct",
        "procs_running",
        "ctx_involuntary_per_s",
        "disk_read_bytes_per_s",
        "psi_cpu_some_pct",
        "psi_memory_some_pct",
        "psi_io_some_pct",
        "swap_in_bytes_per_s",
        "swap_out_bytes_per_s",
    ):
        setattr(out, name, _median_or_none(present(samples, lambda s, n=name: getattr(s, n))))
    # NVML's readings describe their past sample period: only those inside the counted steps count.
    window = gpu_util_window(record)
    out.gpu_util_pct = window.util_pct if window is not None else None
    swap = [
        max(s.swap_in_bytes_per_s or 0.0, s.swap_out_bytes_per_s or 0.0)
        for s in samples
        if s.swap_in_bytes_per_s is not None or s.swap_out_bytes_per_s is not None
    ]
    if swap:
        out.swap_active_share = sum(1 for v in swap if v > SWAP_ACTIVE_BYTES_PER_S) / len(swap)
    rss = present(samples, lambda s: s.rss_bytes)
    out.rss_peak_bytes = int(max(rss)) if rss else None
    avail = present(samples, lambda s: s.mem_available_bytes)
    out.mem_available_min_bytes = int(min(avail)) if avail else None
    cache = present(samples, lambda s: s.page_cache_bytes)
    out.page_cache_bytes = int(median(cache)) if cache else None
    out.disk_read_total_bytes = _integrate(samples, lambda s: s.disk_read_bytes_per_s)
    cores = record.run.cores_total or record.config.cores_total
    if cores:
        counted = {s.index for s in record.counted_steps()}
        readings = other_cores_readings(record.host, counted)
        others = [v for v in other_cores_of(readings, cores, among=record.host) if v is not None]
        if len(others) >= MIN_OTHER_CORES_SAMPLES:
            out.other_processes_cores = median(others)
        if out.cpu_steal_pct is not None:
            out.steal_cores = out.cpu_steal_pct / 100.0 * cores
    ranks = present(samples, lambda s: s.cpu_job_ranks_pct)
    out.job_ranks_cores = median(ranks) / 100.0 if ranks else None
    return out


def _integrate(samples: Sequence[HostSample], rate: Callable[[HostSample], float | None]) -> float | None:
    """Total of a per-second rate over the sampled interval (trapezoids; None when absent)."""
    points = [(s.t_ns, rate(s)) for s in samples]
    points = [(t, r) for t, r in points if r is not None]
    if len(points) < 2:
        return None
    points.sort()
    total = 0.0
    for (t0, r0), (t1, r1) in zip(points, points[1:]):
        total += (t1 - t0) / 1e9 * (r0 + r1) / 2.0
    return total
