"""Machine samples taken by the monitor thread (~10 Hz)."""

from __future__ import annotations

from dataclasses import dataclass


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
