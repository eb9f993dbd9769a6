"""Raw cumulative counters of the machine and of one process, as a counter source reads them.

The monitor turns two readings into rates (:mod:`stave.monitor.host`); a source only reads. Two
sources exist: :mod:`stave.monitor.procfs` (Linux, reads ``/proc`` directly: an order of magnitude
cheaper than psutil per tick, which matters because the sampler holds the GIL while it parses) and
:mod:`stave.monitor.psutil_source` (other systems). A field the machine does not provide is
``None``, never 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class MachineCounters:
    """Machine-wide readings. CPU times are seconds summed over the usable cores.

    Cumulative counters (CPU seconds, bytes read, swap bytes, pressure stall seconds) only make
    sense as differences between two readings; the others are levels.
    """

    cpu_busy_s: float | None = None
    cpu_iowait_s: float | None = None
    # Time the hypervisor ran other guests on these cores (a VM's "steal"): neither busy nor idle here.
    cpu_steal_s: float | None = None
    cpu_total_s: float | None = None
    procs_running: int | None = None
    disk_read_bytes: int | None = None
    mem_available_bytes: int | None = None
    page_cache_bytes: int | None = None
    swap_in_bytes: int | None = None
    swap_out_bytes: int | None = None
    psi_cpu_some_s: float | None = None
    psi_memory_some_s: float | None = None
    psi_io_some_s: float | None = None


@dataclass(frozen=True)
class ProcCounters:
    """One process: cumulative CPU seconds (all its threads), resident memory, thread count.

    ``started_s`` is when the process started, on the same clock as the source's :meth:`now_s`, so
    the monitor can tell a process born since the last tick (all its CPU time is new) from an old
    one it only now discovered. Context switches are those of the process's main thread (the
    kernel reports them per thread; summing every thread would mean reading one file per thread).
    ``reaped_cpu_s`` is the CPU of the process's children that exited and were waited for (the
    kernel's ``cutime + cstime``): how the CPU of a loader worker that exited between two ticks is
    still counted as the job's.
    """

    cpu_s: float
    rss_bytes: int | None
    threads: int | None
    started_s: float
    ctx_voluntary: int | None = None
    ctx_involuntary: int | None = None
    reaped_cpu_s: float | None = None


class CounterSource(Protocol):
    """What the host collector needs from the operating system."""

    def now_s(self) -> float:
        """Seconds on the clock that :attr:`ProcCounters.started_s` uses."""
        ...

    def machine(self) -> MachineCounters:
        """Read the machine-wide counters."""
        ...

    def process(self, pid: int, with_ctx: bool) -> ProcCounters | None:
        """Read one process (``None`` when it has exited); context switches only when ``with_ctx``."""
        ...

    def descendants(self, pid: int) -> list[int]:
        """PIDs of all descendants of ``pid`` (children, their children, ...)."""
        ...

    def close(self) -> None:
        """Release whatever the source holds open."""
        ...
