"""Turns two readings of the machine and the process tree into one :class:`HostSample`.

The process tree is the main process, the DataLoader workers the capture names, and every other
descendant (found by a scan at most every :data:`CHILDREN_REFRESH_S`, because a scan lists
processes and costs far more than reading a few counters). Rates are over the interval since the
previous sample; a counter without a previous reading, or one that went backwards, gives ``None``
for that interval rather than a made-up number.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Callable

import torch

from stave import device as dev
from stave.measure.host import HostSample
from stave.monitor.counters import CounterSource, MachineCounters, ProcCounters
from stave.monitor.procfs import ProcfsSource, ProcPaths
from stave.monitor.psutil_source import PsutilSource

log = logging.getLogger(__name__)

# A scan for child processes lists the kernel's process table; once a second finds subprocesses
# soon enough (they matter when they run for seconds) while the workers, which the capture names
# as soon as they start, are read every tick.
CHILDREN_REFRESH_S = 1.0
# A process whose start time lies within one clock tick before the previous sample may have been
# born in the interval: /proc start times have clock-tick (10 ms) resolution.
START_TIME_SLACK_S = 0.01


def _rate(new: float | int | None, old: float | int | None, dt_s: float) -> float | None:
    """Per-second rate of a cumulative counter; ``None`` when absent or when it went backwards."""
    if new is None or old is None or dt_s <= 0 or new < old:
        return None
    return (new - old) / dt_s


def _share_pct(new: float | None, old: float | None, dt_s: float) -> float | None:
    """Stall seconds per wall second as a percentage (0-100) of the interval."""
    rate = _rate(new, old, dt_s)
    return None if rate is None else min(100.0, 100.0 * rate)


class HostCollector:
    """Keeps the previous readings and produces one :class:`HostSample` per call to :meth:`sample`."""

    def __init__(
        self,
        source: CounterSource,
        *,
        main_pid: int,
        worker_pids: Callable[[], list[int]],
        device: torch.device | str = "cpu",
        clock: Callable[[], float] = time.perf_counter,
        job_root_pid: int | None = None,
    ) -> None:
        self._source = source
        # A rank of a multi-process run: the launcher whose descendants are the job's other ranks.
        self._job_root_pid = job_root_pid
        self._job_ranks: list[int] = []
        self._job_ranks_seen: set[int] = set()  # an exited rank is not a reaped child of this process
        self._clock = clock
        self._main_pid = main_pid
        self._worker_pids = worker_pids
        self._device = torch.device(device)
        self._nvml = None
        if dev.is_cuda(self._device):
            self._nvml = dev.NvmlReader.open(self._device.index or 0)
        self._cuda_memory_ok = True
        self._prev_machine: MachineCounters | None = None
        self._prev_procs: dict[int, ProcCounters] = {}
        self._prev_wall_s = 0.0
        self._prev_src_s = 0.0
        self._children: list[int] = []
        self._workers: list[int] = []
        self._others: list[int] = []
        self._prev_workers: set[int] = set()
        self._children_scanned_s = float("-inf")

    def baseline(self) -> None:
        """Take the first reading, which later samples are differenced against."""
        self._prev_wall_s = self._clock()
        self._prev_src_s = self._source.now_s()
        self._prev_machine = self._source.machine()
        self._prev_procs = {}
        for pid, with_ctx in self._tree():
            counters = self._source.process(pid, with_ctx)
            if counters is not None:
                self._prev_procs[pid] = counters
        self._prev_workers = set(self._workers)

    def _tree(self) -> list[tuple[int, bool]]:
        """``(pid, with_ctx)`` for the main process, the workers, and the other descendants."""
        now = self._clock()
        if now - self._children_scanned_s >= CHILDREN_REFRESH_S:
            self._children = self._source.descendants(self._main_pid)
            if self._job_root_pid is not None:
                own = {self._main_pid, *self._children}
                tree = self._source.descendants(self._job_root_pid)
                self._job_ranks = [self._job_root_pid] + [p for p in tree if p not in own and p != self._job_root_pid]
                self._job_ranks_seen.update(self._job_ranks)
            self._children_scanned_s = now
        self._workers = [p for p in dict.fromkeys(self._worker_pids()) if p != self._main_pid]
        worker_set = set(self._workers)
        others = [p for p in self._children if p not in worker_set and p != self._main_pid]
        self._others = others
        return ([(self._main_pid, True)] + [(p, True) for p in self._workers] + [(p, False) for p in others]
                + [(p, False) for p in self._job_ranks if p not in worker_set])

    def sample(self, t_ns: int, step: int) -> HostSample:
        """Read everything now and difference it against the previous reading."""
        wall_s = self._clock()
        src_s = self._source.now_s()
        dt_s = wall_s - self._prev_wall_s
        machine = self._source.machine()
        procs: dict[int, ProcCounters] = {}
        for pid, with_ctx in self._tree():
            counters = self._source.process(pid, with_ctx)
            if counters is not None:
                procs[pid] = counters
        if any(p not in procs for p in self._children):
            self._children = [p for p in self._children if p in procs]
        if any(p not in procs for p in self._job_ranks):
            self._job_ranks = [p for p in self._job_ranks if p in procs]

        out = HostSample(t_ns=t_ns, step=step)
        self._fill_processes(out, procs, dt_s)
        self._fill_machine(out, machine, dt_s)
        self._fill_device(out)

        self._prev_machine = machine
        self._prev_procs = procs
        self._prev_workers = set(self._workers)
        self._prev_wall_s = wall_s
        self._prev_src_s = src_s
        return out

    def _cpu_delta_s(self, pid: int, now: ProcCounters) -> float | None:
        """CPU seconds ``pid`` used in the interval, or ``None`` when that cannot be known."""
        before = self._prev_procs.get(pid)
        if before is not None:
            return now.cpu_s - before.cpu_s if now.cpu_s >= before.cpu_s else None
        if now.started_s >= self._prev_src_s - START_TIME_SLACK_S:
            return now.cpu_s  # born during the interval: all its CPU time is new
        return None  # an old process seen for the first time: its history is unknown

    def _ctx_delta(self, pid: int, now: ProcCounters) -> tuple[int, int] | None:
        before = self._prev_procs.get(pid)
        if now.ctx_voluntary is None or now.ctx_involuntary is None:
            return None
        if before is None:
            if now.started_s >= self._prev_src_s - START_TIME_SLACK_S:
                return now.ctx_voluntary, now.ctx_involuntary
            return None
        if before.ctx_voluntary is None or before.ctx_involuntary is None:
            return None
        return now.ctx_voluntary - before.ctx_voluntary, now.ctx_involuntary - before.ctx_involuntary

    def _group_cpu_pct(self, pids: list[int], procs: dict[int, ProcCounters], dt_s: float) -> float | None:
        deltas = [self._cpu_delta_s(p, procs[p]) for p in pids if p in procs]
        known = [d for d in deltas if d is not None]
        if not known or dt_s <= 0:
            return None
        return 100.0 * sum(known) / dt_s

    def _exited_cpu_s(self, procs: dict[int, ProcCounters]) -> tuple[float, bool]:
        """CPU seconds of the tree's processes that exited in the interval, not yet counted.

        The kernel adds a waited-for child's whole CPU time (its own reaped children's included) to
        its parent's ``reaped_cpu_s``. That holds for the main process's children (a non-persistent
        loader worker) and for their children in turn: torch.compile's compile workers run a C++
        compiler per kernel, seconds of CPU in processes that live between two ticks, and left out
        that CPU reads as another process's (a false MACHINE_BUSY). So the reaped CPU of every process
        of this rank's tree counts; what the previous tick already read of the processes that
        disappeared was counted then, so only the rest is new (all of it for a process born and gone
        between two ticks). Also whether the exited ones were loader workers (or the worker set
        changed, a worker that was never read).
        """
        ranks = self._job_ranks_seen
        reaped = 0.0
        known = False
        for pid, now in procs.items():
            if pid in ranks or now.reaped_cpu_s is None:
                continue
            before = self._prev_procs.get(pid)
            if before is not None:
                if before.reaped_cpu_s is not None and now.reaped_cpu_s >= before.reaped_cpu_s:
                    reaped += now.reaped_cpu_s - before.reaped_cpu_s
                    known = True
            elif now.started_s >= self._prev_src_s - START_TIME_SLACK_S:
                reaped += now.reaped_cpu_s  # born during the interval: all of it is new
                known = True
        if not known:
            return 0.0, False
        gone = [p for p in self._prev_procs if p not in procs and p != self._main_pid and p not in ranks]
        counted_s = sum(self._prev_procs[p].cpu_s + (self._prev_procs[p].reaped_cpu_s or 0.0) for p in gone)
        exited_s = max(0.0, reaped - counted_s)
        were_workers = any(p in self._prev_workers for p in gone) or set(self._workers) != self._prev_workers
        return exited_s, were_workers

    def _fill_processes(self, out: HostSample, procs: dict[int, ProcCounters], dt_s: float) -> None:
        main = procs.get(self._main_pid)
        if main is not None:
            out.cpu_main_pct = self._group_cpu_pct([self._main_pid], procs, dt_s)
            out.main_threads = main.threads
        out.workers_alive = sum(1 for p in self._workers if p in procs)
        out.cpu_workers_pct = self._group_cpu_pct(self._workers, procs, dt_s)
        out.cpu_children_pct = self._group_cpu_pct(self._others, procs, dt_s)
        if self._job_root_pid is not None:
            out.cpu_job_ranks_pct = self._group_cpu_pct(self._job_ranks, procs, dt_s)
        exited_s, were_workers = self._exited_cpu_s(procs)
        if exited_s > 0 and dt_s > 0:
            # Non-persistent loader workers exit at every epoch's end: their last moments' CPU is
            # the job's, and left out it would read as another process's (a false MACHINE_BUSY).
            if were_workers:
                out.cpu_workers_pct = (out.cpu_workers_pct or 0.0) + 100.0 * exited_s / dt_s
            else:
                out.cpu_children_pct = (out.cpu_children_pct or 0.0) + 100.0 * exited_s / dt_s
        rss = [c.rss_bytes for p, c in procs.items() if c.rss_bytes is not None and p not in self._job_ranks_seen]
        # Forked workers share copy-on-write pages with the parent; RSS counts those in each
        # process, so the tree's sum is an upper bound on its memory (PSS would need smaps).
        out.rss_bytes = sum(rss) if rss and main is not None and main.rss_bytes is not None else None
        ctx = [self._ctx_delta(p, procs[p]) for p in [self._main_pid, *self._workers] if p in procs]
        known = [c for c in ctx if c is not None]
        if known and dt_s > 0:
            out.ctx_voluntary_per_s = sum(v for v, _ in known) / dt_s
            out.ctx_involuntary_per_s = sum(i for _, i in known) / dt_s

    def _fill_machine(self, out: HostSample, now: MachineCounters, dt_s: float) -> None:
        before = self._prev_machine or MachineCounters()
        total = _rate(now.cpu_total_s, before.cpu_total_s, 1.0)
        if total:
            busy = _rate(now.cpu_busy_s, before.cpu_busy_s, 1.0)
            wait = _rate(now.cpu_iowait_s, before.cpu_iowait_s, 1.0)
            out.cpu_system_pct = None if busy is None else min(100.0, 100.0 * busy / total)
            out.iowait_pct = None if wait is None else min(100.0, 100.0 * wait / total)
            steal = _rate(now.cpu_steal_s, before.cpu_steal_s, 1.0)
            out.cpu_steal_pct = None if steal is None else min(100.0, 100.0 * steal / total)
        out.procs_running = now.procs_running
        out.disk_read_bytes_per_s = _rate(now.disk_read_bytes, before.disk_read_bytes, dt_s)
        out.mem_available_bytes = now.mem_available_bytes
        out.page_cache_bytes = now.page_cache_bytes
        out.swap_in_bytes_per_s = _rate(now.swap_in_bytes, before.swap_in_bytes, dt_s)
        out.swap_out_bytes_per_s = _rate(now.swap_out_bytes, before.swap_out_bytes, dt_s)
        out.psi_cpu_some_pct = _share_pct(now.psi_cpu_some_s, before.psi_cpu_some_s, dt_s)
        out.psi_memory_some_pct = _share_pct(now.psi_memory_some_s, before.psi_memory_some_s, dt_s)
        out.psi_io_some_pct = _share_pct(now.psi_io_some_s, before.psi_io_some_s, dt_s)

    def _fill_device(self, out: HostSample) -> None:
        if self._nvml is not None:
            reading = self._nvml.read()
            out.gpu_util_pct = reading.util_pct
            out.gpu_mem_used_bytes = reading.mem_used_bytes
            out.gpu_power_w = reading.power_w
        if self._cuda_memory_ok and dev.is_cuda(self._device):
            try:
                out.cuda_allocated_bytes = dev.memory_allocated_bytes(self._device)
                out.cuda_peak_bytes = dev.max_memory_allocated_bytes(self._device)
            except RuntimeError as exc:
                # A CUDA context in an error state (after a device-side assert) refuses every
                # call; stop asking rather than fail each tick.
                self._cuda_memory_ok = False
                log.debug("CUDA memory counters unavailable: %s", exc)

    def close(self) -> None:
        """Release NVML and the source's open files."""
        if self._nvml is not None:
            self._nvml.close()
            self._nvml = None
        self._source.close()


def default_source(proc_paths: ProcPaths | None = None) -> CounterSource:
    """The /proc source on Linux, psutil elsewhere (or where /proc is not mounted)."""
    paths = proc_paths or ProcPaths()
    if os.path.exists(os.path.join(paths.proc, str(os.getpid()), "stat")):
        return ProcfsSource(paths)
    log.debug("no %s/<pid>/stat; reading counters through psutil", paths.proc)
    return PsutilSource()
