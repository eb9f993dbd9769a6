"""The portable counter source, through psutil, for systems without Linux's ``/proc``.

Slower per tick than :mod:`stave.monitor.procfs` (psutil builds named tuples and re-opens files),
which is acceptable at 10 Hz. What the platform does not report (iowait outside Linux, pressure
stall information, page cache on some systems) is ``None``.
"""

from __future__ import annotations

import logging
import time

import psutil

from stave.monitor.counters import MachineCounters, ProcCounters

log = logging.getLogger(__name__)


class PsutilSource:
    """Counters from psutil. See :class:`stave.monitor.counters.CounterSource`."""

    def __init__(self) -> None:
        self._procs: dict[int, psutil.Process] = {}
        self._logged: set[str] = set()

    def _absent(self, what: str, why: object) -> None:
        if what not in self._logged:
            self._logged.add(what)
            log.debug("%s is absent: %s", what, why)

    def now_s(self) -> float:
        """Wall-clock seconds since the epoch: the clock of ``Process.create_time()``."""
        return time.time()

    def machine(self) -> MachineCounters:
        """Machine CPU, memory, swap and disk counters; pressure stall is never available here."""
        values: dict[str, float | int | None] = {}
        try:
            times = psutil.cpu_times()
        except (OSError, psutil.Error) as exc:
            self._absent("machine CPU", exc)
        else:
            idle = times.idle
            iowait = getattr(times, "iowait", None)
            steal = getattr(times, "steal", 0.0)
            total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
            values["cpu_total_s"] = total
            values["cpu_busy_s"] = total - idle - (iowait or 0.0) - steal
            values["cpu_iowait_s"] = iowait
            values["cpu_steal_s"] = steal
            if iowait is None:
                self._absent("iowait", "not reported on this platform")
        try:
            vm = psutil.virtual_memory()
        except (OSError, psutil.Error) as exc:
            self._absent("memory", exc)
        else:
            values["mem_available_bytes"] = int(vm.available)
            cached = getattr(vm, "cached", None)
            values["page_cache_bytes"] = int(cached) if cached is not None else None
        try:
            swap = psutil.swap_memory()
        except (OSError, psutil.Error) as exc:
            self._absent("swap", exc)
        else:
            values["swap_in_bytes"] = int(swap.sin)
            values["swap_out_bytes"] = int(swap.sout)
        try:
            disk = psutil.disk_io_counters(perdisk=False)
        except (OSError, psutil.Error, RuntimeError) as exc:
            disk = None
            self._absent("disk read rate", exc)
        if disk is not None:
            values["disk_read_bytes"] = int(disk.read_bytes)
        return MachineCounters(**values)  # type: ignore[arg-type]

    def _proc(self, pid: int) -> psutil.Process:
        proc = self._procs.get(pid)
        if proc is None:
            proc = psutil.Process(pid)
            self._procs[pid] = proc
        return proc

    def process(self, pid: int, with_ctx: bool) -> ProcCounters | None:
        """One process's CPU, RSS, threads (and context switches); ``None`` once it exited."""
        try:
            proc = self._proc(pid)
            with proc.oneshot():
                cpu = proc.cpu_times()
                rss = int(proc.memory_info().rss)
                threads = proc.num_threads()
                started = proc.create_time()
                ctx = proc.num_ctx_switches() if with_ctx else None
        except psutil.AccessDenied as exc:
            self._absent(f"process {pid}", exc)
            self._procs.pop(pid, None)
            return None
        except psutil.Error:
            self._procs.pop(pid, None)
            return None
        return ProcCounters(
            cpu_s=cpu.user + cpu.system,
            rss_bytes=rss,
            threads=threads,
            started_s=started,
            ctx_voluntary=ctx.voluntary if ctx is not None else None,
            ctx_involuntary=ctx.involuntary if ctx is not None else None,
            reaped_cpu_s=_reaped(cpu),
        )

    def descendants(self, pid: int) -> list[int]:
        """All descendants of ``pid`` (a scan of every process: call it rarely)."""
        try:
            return [c.pid for c in self._proc(pid).children(recursive=True)]
        except psutil.Error as exc:
            log.debug("cannot list children of %d: %s", pid, exc)
            return []

    def close(self) -> None:
        """Drop the cached process handles."""
        self._procs.clear()


def _reaped(cpu: object) -> float | None:
    """CPU of exited, waited-for children (``children_user + children_system``; absent on some systems)."""
    user, system = getattr(cpu, "children_user", None), getattr(cpu, "children_system", None)
    return None if user is None or system is None else float(user) + float(system)
