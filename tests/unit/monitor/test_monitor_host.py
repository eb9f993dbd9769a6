"""HostCollector arithmetic on a scripted counter source, and the real Monitor on this machine."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import psutil
import pytest

from stave.monitor import Monitor, ProcPaths
from stave.monitor.counters import MachineCounters, ProcCounters
from stave.monitor.host import CHILDREN_REFRESH_S, HostCollector

MAIN, WORKER, OLD_CHILD = 100, 101, 102


class ScriptedSource:
    """A counter source whose readings the test sets before each sample."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.machine_reading = MachineCounters()
        self.procs: dict[int, ProcCounters] = {}
        self.children: list[int] = []
        self.descendant_calls = 0

    def now_s(self) -> float:
        return self.now

    def machine(self) -> MachineCounters:
        return self.machine_reading

    def process(self, pid: int, with_ctx: bool) -> ProcCounters | None:
        return self.procs.get(pid)

    def descendants(self, pid: int) -> list[int]:
        self.descendant_calls += 1
        return list(self.children)

    def close(self) -> None:
        pass


def _proc(cpu_s: float, started_s: float = 0.0, vol: int = 0, invol: int = 0, rss: int = 1000) -> ProcCounters:
    return ProcCounters(cpu_s=cpu_s, rss_bytes=rss, threads=3, started_s=started_s, ctx_voluntary=vol, ctx_involuntary=invol)


class Clock:
    def __init__(self) -> None:
        self.t = 50.0

    def __call__(self) -> float:
        return self.t


def _collector(source: ScriptedSource, clock: Clock, workers: list[int]) -> HostCollector:
    return HostCollector(source, main_pid=MAIN, worker_pids=lambda: list(workers), clock=clock)


def test_rates_and_shares_over_the_interval() -> None:
    src, clock = ScriptedSource(), Clock()
    src.machine_reading = MachineCounters(
        cpu_busy_s=10.0, cpu_iowait_s=1.0, cpu_total_s=40.0, procs_running=2, disk_read_bytes=1000,
        mem_available_bytes=5_000, page_cache_bytes=700, swap_in_bytes=0, swap_out_bytes=0,
        psi_cpu_some_s=3.0, psi_memory_some_s=0.0, psi_io_some_s=1.0,
    )
    src.procs = {MAIN: _proc(1.0, vol=10, invol=1), WORKER: _proc(2.0, vol=5)}
    c = _collector(src, clock, [WORKER])
    c.baseline()
    clock.t += 0.5
    src.now += 0.5
    src.machine_reading = MachineCounters(
        cpu_busy_s=10.6, cpu_iowait_s=1.1, cpu_total_s=41.0, procs_running=4, disk_read_bytes=51_000,
        mem_available_bytes=4_000, page_cache_bytes=800, swap_in_bytes=4096, swap_out_bytes=0,
        psi_cpu_some_s=3.25, psi_memory_some_s=0.0, psi_io_some_s=1.0,
    )
    src.procs = {MAIN: _proc(1.25, vol=20, invol=2, rss=3000), WORKER: _proc(2.5, vol=15, rss=2000)}
    s = c.sample(t_ns=7, step=3)
    assert (s.t_ns, s.step) == (7, 3)
    assert s.cpu_main_pct == pytest.approx(50.0)
    assert s.cpu_workers_pct == pytest.approx(100.0)
    assert s.cpu_children_pct is None and s.workers_alive == 1 and s.main_threads == 3
    assert s.cpu_system_pct == pytest.approx(60.0)
    assert s.iowait_pct == pytest.approx(10.0)
    assert s.procs_running == 4
    assert s.disk_read_bytes_per_s == pytest.approx(100_000.0)
    assert s.mem_available_bytes == 4_000 and s.page_cache_bytes == 800
    assert s.swap_in_bytes_per_s == pytest.approx(8192.0) and s.swap_out_bytes_per_s == 0.0
    assert s.psi_cpu_some_pct == pytest.approx(50.0) and s.psi_io_some_pct == 0.0
    assert s.ctx_voluntary_per_s == pytest.approx((10 + 10) / 0.5)
    assert s.ctx_involuntary_per_s == pytest.approx(1 / 0.5)
    assert s.rss_bytes == 5000
    assert s.gpu_util_pct is None and s.cuda_allocated_bytes is None


def test_absent_counters_stay_absent_never_zero() -> None:
    src, clock = ScriptedSource(), Clock()
    src.procs = {MAIN: _proc(1.0)}
    c = _collector(src, clock, [])
    c.baseline()
    clock.t += 0.1
    s = c.sample(0, 0)
    for name in ("cpu_system_pct", "iowait_pct", "procs_running", "disk_read_bytes_per_s", "mem_available_bytes",
                 "page_cache_bytes", "swap_in_bytes_per_s", "psi_cpu_some_pct", "psi_memory_some_pct",
                 "psi_io_some_pct", "cpu_workers_pct", "cpu_children_pct"):
        assert getattr(s, name) is None, name
    assert s.workers_alive == 0


def test_a_counter_that_went_backwards_gives_none() -> None:
    src, clock = ScriptedSource(), Clock()
    src.machine_reading = MachineCounters(disk_read_bytes=10_000)
    src.procs = {MAIN: _proc(5.0)}
    c = _collector(src, clock, [])
    c.baseline()
    clock.t += 0.1
    src.machine_reading = MachineCounters(disk_read_bytes=10)
    src.procs = {MAIN: _proc(4.0)}
    s = c.sample(0, 0)
    assert s.disk_read_bytes_per_s is None and s.cpu_main_pct is None


def test_new_processes_count_only_when_born_in_the_interval() -> None:
    src, clock = ScriptedSource(), Clock()
    src.procs = {MAIN: _proc(1.0)}
    workers: list[int] = []
    c = _collector(src, clock, workers)
    c.baseline()
    clock.t += 0.2
    src.now += 0.2
    workers.extend([WORKER, OLD_CHILD])
    # WORKER started 0.1 s ago (inside the interval); OLD_CHILD an hour ago, so its 50 CPU
    # seconds are history that must not be charged to this interval.
    src.procs = {MAIN: _proc(1.0), WORKER: _proc(0.1, started_s=src.now - 0.1), OLD_CHILD: _proc(50.0, started_s=src.now - 3600)}
    s = c.sample(0, 0)
    assert s.workers_alive == 2
    assert s.cpu_workers_pct == pytest.approx(50.0)
    clock.t += 0.2
    src.now += 0.2
    src.procs = {MAIN: _proc(1.0), WORKER: _proc(0.2, started_s=src.now - 0.3), OLD_CHILD: _proc(50.1, started_s=src.now - 3600)}
    assert c.sample(0, 0).cpu_workers_pct == pytest.approx(100.0)
    src.procs = {MAIN: _proc(1.0)}  # both exited
    clock.t += 0.2
    s = c.sample(0, 0)
    assert s.workers_alive == 0 and s.cpu_workers_pct is None


def test_children_are_rescanned_at_most_once_per_refresh_interval() -> None:
    src, clock = ScriptedSource(), Clock()
    src.procs = {MAIN: _proc(1.0), OLD_CHILD: _proc(1.0)}
    src.children = [OLD_CHILD]
    c = _collector(src, clock, [])
    c.baseline()
    for _ in range(5):
        clock.t += 0.1
        s = c.sample(0, 0)
        assert s.cpu_children_pct == pytest.approx(0.0)
    assert src.descendant_calls == 1
    clock.t += CHILDREN_REFRESH_S
    c.sample(0, 0)
    assert src.descendant_calls == 2


# --- The real thing ----------------------------------------------------------------------------

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
_BUSY = "import time\nend = time.time() + 20\nwhile time.time() < end:\n    pass\n"


@linux_only
def test_busy_children_show_up_as_workers_and_as_other_children() -> None:
    main_rss = psutil.Process().memory_info().rss
    named = subprocess.Popen([sys.executable, "-c", _BUSY])
    unnamed = subprocess.Popen([sys.executable, "-c", _BUSY])
    try:
        time.sleep(0.3)  # let both start spinning before the baseline
        handles = [psutil.Process(named.pid), psutil.Process(unnamed.pid)]
        monitor = Monitor(position=lambda: (0, "forward"), worker_pids=lambda: [named.pid],
                          host_interval_s=0.05, stacks=False)
        cpu0 = [sum(h.cpu_times()[:2]) for h in handles]
        t0 = time.perf_counter()
        monitor.start()
        time.sleep(0.8)
        monitor.stop()
        cpu1 = [sum(h.cpu_times()[:2]) for h in handles]
        wall_s = time.perf_counter() - t0
    finally:
        for child in (named, unnamed):
            child.kill()
            child.wait()
    samples = monitor.host_samples()
    assert monitor.error is None
    assert len(samples) >= 5
    # What psutil says each child used over the same window, in percent of one core: on a loaded
    # machine a spinning child gets less than a core, so compare with that, not with 100.
    expected = [100.0 * (b - a) / wall_s for a, b in zip(cpu0, cpu1)]
    workers = [s.cpu_workers_pct for s in samples if s.cpu_workers_pct is not None]
    children = [s.cpu_children_pct for s in samples if s.cpu_children_pct is not None]
    for measured, want in ((workers, expected[0]), (children, expected[1])):
        assert want > 5.0
        assert len(measured) >= 0.8 * len(samples)
        assert abs(statistics.mean(measured) - want) < 0.35 * want + 5.0, (statistics.mean(measured), want)
    assert all(s.workers_alive == 1 for s in samples)
    assert samples[-1].rss_bytes is not None and samples[-1].rss_bytes > main_rss + 4 * 2**20


@linux_only
def test_host_samples_have_their_fields_and_absent_pressure_is_none(tmp_path) -> None:
    paths = ProcPaths(pressure=str(tmp_path / "missing"))
    monitor = Monitor(position=lambda: (7, "data_wait"), worker_pids=list, host_interval_s=0.05,
                      stacks=False, proc_paths=paths)
    cpu0, t0 = time.process_time(), time.perf_counter()
    monitor.start()
    # 1.5 s at 20 Hz: about 30 ticks, so a slow first tick or a GC pause in a long test session
    # cannot leave fewer than the 4 the test needs.
    deadline = time.perf_counter() + 1.5
    while time.perf_counter() < deadline:
        sum(i * i for i in range(10_000))
    monitor.stop()
    expected_pct = 100.0 * (time.process_time() - cpu0) / (time.perf_counter() - t0)
    samples = monitor.host_samples()
    assert monitor.stack_profile().interval_ns == 0 and not monitor.stack_profile().samples
    assert len(samples) >= 4
    assert [s.t_ns for s in samples] == sorted(s.t_ns for s in samples)
    for s in samples:
        assert s.step == 7
        assert s.psi_cpu_some_pct is None and s.psi_memory_some_pct is None and s.psi_io_some_pct is None
        assert s.cpu_main_pct is not None and s.cpu_main_pct >= 0
        assert s.cpu_system_pct is not None and 0 <= s.cpu_system_pct <= 100
        assert s.mem_available_bytes and s.rss_bytes and s.main_threads
        assert s.workers_alive == 0 and s.cpu_workers_pct is None
        assert s.gpu_util_pct is None and s.cuda_allocated_bytes is None and s.cuda_peak_bytes is None
    # The process's CPU time over the same window, as the OS accounts it for this process.
    measured = statistics.mean(s.cpu_main_pct for s in samples)
    assert expected_pct > 5.0
    assert abs(measured - expected_pct) < 0.35 * expected_pct + 5.0, (measured, expected_pct)
    if os.path.exists("/proc/pressure/cpu"):
        present = Monitor(position=lambda: (0, ""), worker_pids=list, host_interval_s=0.05, stacks=False)
        present.start()
        time.sleep(0.2)
        present.stop()
        assert any(s.psi_cpu_some_pct is not None for s in present.host_samples())


def test_gpu_counters_come_from_the_device_helpers(monkeypatch) -> None:
    # No GPU here: stand in for NVML and the CUDA allocator at stave.device's boundary, so the
    # monitor's own GPU path (open, read every tick, stop asking after a CUDA error) still runs.
    from stave import device as dev

    class FakeNvml:
        closed = False

        def read(self) -> dev.GpuReading:
            return dev.GpuReading(util_pct=87.0, mem_used_bytes=5 * 2**30, power_w=310.5)

        def close(self) -> None:
            FakeNvml.closed = True

    allocated = iter([1000, 2000])
    monkeypatch.setattr(dev.NvmlReader, "open", classmethod(lambda cls, index=0: FakeNvml()))
    monkeypatch.setattr(dev, "memory_allocated_bytes", lambda device=None: next(allocated))
    monkeypatch.setattr(dev, "max_memory_allocated_bytes", lambda device=None: 4096)
    src, clock = ScriptedSource(), Clock()
    src.procs = {MAIN: _proc(1.0)}
    c = HostCollector(src, main_pid=MAIN, worker_pids=list, device="cuda:0", clock=clock)
    c.baseline()
    clock.t += 0.1
    s = c.sample(0, 0)
    assert (s.gpu_util_pct, s.gpu_mem_used_bytes, s.gpu_power_w) == (87.0, 5 * 2**30, 310.5)
    assert (s.cuda_allocated_bytes, s.cuda_peak_bytes) == (1000, 4096)

    def broken(device=None) -> int:
        raise RuntimeError("CUDA error: device-side assert triggered")

    monkeypatch.setattr(dev, "memory_allocated_bytes", broken)
    clock.t += 0.1
    s = c.sample(0, 0)
    assert s.cuda_allocated_bytes is None and s.gpu_util_pct == 87.0
    monkeypatch.setattr(dev, "memory_allocated_bytes", lambda device=None: 1 / 0)  # must not be called again
    clock.t += 0.1
    assert c.sample(0, 0).cuda_allocated_bytes is None
    c.close()
    assert FakeNvml.closed


def test_the_portable_psutil_source_feeds_the_same_collector() -> None:
    from stave.monitor.psutil_source import PsutilSource

    c = HostCollector(PsutilSource(), main_pid=os.getpid(), worker_pids=list)
    c.baseline()
    deadline = time.perf_counter() + 0.15
    while time.perf_counter() < deadline:
        sum(i * i for i in range(10_000))
    s = c.sample(0, 0)
    c.close()
    assert s.cpu_main_pct is not None and s.cpu_main_pct > 0
    assert s.cpu_system_pct is not None and s.mem_available_bytes and s.rss_bytes and s.main_threads
    assert s.psi_cpu_some_pct is None and s.procs_running is None  # psutil reports neither


def test_a_worker_that_exited_between_ticks_still_counts_as_the_jobs() -> None:
    # A non-persistent worker used 0.3 s of CPU after the last tick and was reaped before this one:
    # the main process's reaped-children CPU grows by its whole lifetime (1.0 + 0.3 s), of which
    # 1.0 s was counted while it lived. The 0.3 s is the workers', not another process's.
    src, clock = ScriptedSource(), Clock()
    src.procs = {MAIN: ProcCounters(1.0, 1000, 3, 0.0, reaped_cpu_s=0.0), WORKER: _proc(1.0)}
    c = _collector(src, clock, [WORKER])
    c.baseline()
    clock.t += 0.5
    src.now += 0.5
    src.procs = {MAIN: ProcCounters(1.1, 1000, 3, 0.0, reaped_cpu_s=1.3)}
    s = c.sample(0, 0)
    assert s.cpu_main_pct == pytest.approx(20.0)
    assert s.cpu_workers_pct == pytest.approx(60.0)
    assert s.cpu_children_pct is None


def test_a_child_born_and_reaped_between_ticks_counts_whole() -> None:
    src, clock = ScriptedSource(), Clock()
    src.procs = {MAIN: ProcCounters(1.0, 1000, 3, 0.0, reaped_cpu_s=2.0)}
    c = _collector(src, clock, [])
    c.baseline()
    clock.t += 0.5
    src.now += 0.5
    src.procs = {MAIN: ProcCounters(1.0, 1000, 3, 0.0, reaped_cpu_s=2.25)}
    s = c.sample(0, 0)
    assert s.cpu_children_pct == pytest.approx(50.0) and s.cpu_workers_pct is None


def test_a_grandchild_reaped_by_a_child_counts_as_the_jobs() -> None:
    # torch.compile's compile worker (a child of the trainer) runs a C++ compiler per kernel: 0.4 s
    # of CPU in a process born and reaped between two ticks, added to the worker's reaped CPU.
    compile_worker = 300
    src, clock = TreeSource({MAIN: [compile_worker]}), Clock()
    src.procs = {MAIN: ProcCounters(1.0, 1000, 3, 0.0, reaped_cpu_s=0.0),
                 compile_worker: ProcCounters(0.5, 1000, 1, 0.0, reaped_cpu_s=2.0)}
    c = _collector(src, clock, [])
    c.baseline()
    clock.t += 0.5
    src.now += 0.5
    src.procs = {MAIN: ProcCounters(1.1, 1000, 3, 0.0, reaped_cpu_s=0.0),
                 compile_worker: ProcCounters(0.55, 1000, 1, 0.0, reaped_cpu_s=2.4)}
    s = c.sample(0, 0)
    # The worker's own 0.05 s and its compiler's 0.4 s, over 0.5 s: the job's, not another process's.
    assert s.cpu_children_pct == pytest.approx(90.0) and s.cpu_main_pct == pytest.approx(20.0)
    # The worker itself exits and is reaped by the trainer with its whole history (0.6 + 2.4 s),
    # all of which but its last 0.05 s was counted while it lived.
    clock.t += 0.5
    src.now += 0.5
    src.procs = {MAIN: ProcCounters(1.2, 1000, 3, 0.0, reaped_cpu_s=3.0)}
    s = c.sample(0, 1)
    assert s.cpu_children_pct == pytest.approx(10.0)


class TreeSource(ScriptedSource):
    """Descendants per pid: this rank's own children, and its launcher's children (the other ranks)."""

    def __init__(self, tree: dict[int, list[int]]) -> None:
        super().__init__()
        self.tree = tree

    def descendants(self, pid: int) -> list[int]:
        return list(self.tree.get(pid, []))


def test_other_local_ranks_are_the_job_not_other_processes() -> None:
    agent, sibling, sibling_worker = 90, 200, 201
    src, clock = TreeSource({agent: [MAIN, WORKER, sibling, sibling_worker], MAIN: [WORKER]}), Clock()
    src.procs = {MAIN: _proc(1.0), WORKER: _proc(1.0), agent: _proc(0.1), sibling: _proc(1.0), sibling_worker: _proc(1.0)}
    c = HostCollector(src, main_pid=MAIN, worker_pids=lambda: [WORKER], clock=clock, job_root_pid=agent)
    c.baseline()
    clock.t += 1.0
    src.procs = {MAIN: _proc(1.5), WORKER: _proc(1.25), agent: _proc(0.11), sibling: _proc(1.5, rss=9000),
                 sibling_worker: _proc(1.25, rss=9000)}
    s = c.sample(0, 0)
    assert s.cpu_main_pct == pytest.approx(50.0) and s.cpu_workers_pct == pytest.approx(25.0)
    assert s.cpu_job_ranks_pct == pytest.approx(76.0)  # the other rank, its worker, the agent
    assert s.cpu_children_pct is None
    assert s.rss_bytes == 2000  # this rank's tree only
    # The other rank exits: its CPU is not taken for this rank's reaped children.
    clock.t += 1.0
    src.procs = {MAIN: _proc(2.0), WORKER: _proc(1.5), agent: _proc(0.12)}
    s = c.sample(0, 1)
    assert s.cpu_job_ranks_pct == pytest.approx(1.0) and s.cpu_children_pct is None


def test_a_single_process_run_has_no_job_ranks() -> None:
    src, clock = ScriptedSource(), Clock()
    src.procs = {MAIN: _proc(1.0)}
    c = _collector(src, clock, [])
    c.baseline()
    clock.t += 0.1
    assert c.sample(0, 0).cpu_job_ranks_pct is None


def test_cores_held_outside_the_job_over_its_samples() -> None:
    """What the probes are told other processes held: the machine's busy cores less the job's tree
    and its other ranks, the cores the job may not use filled first, a median of three or more."""
    from stave.measure.host import HostSample, other_cores, outside_job_cores

    def sample(system: float, main: float = 100.0, ranks: float | None = None, steal: float | None = None):
        return HostSample(t_ns=0, cpu_system_pct=system, cpu_main_pct=main, cpu_job_ranks_pct=ranks,
                          cpu_steal_pct=steal)

    assert other_cores(HostSample(t_ns=0), 2) is None
    assert other_cores(sample(100.0), 2) == pytest.approx(1.0)
    assert other_cores(sample(50.0, steal=25.0), 2) == pytest.approx(0.5)  # steal: cores the job could not have
    busy = [sample(100.0), sample(95.0), sample(100.0)]
    assert outside_job_cores(busy, 2, 2) == pytest.approx(1.0)
    assert outside_job_cores(busy[:2], 2, 2) is None  # two windows may be the run's own edges
    assert outside_job_cores([sample(100.0, ranks=100.0)] * 3, 2, 2) == pytest.approx(0.0)  # the job's other rank
    # On 4 cores with 2 usable (affinity), another job's 2 cores are off the job's cores.
    assert outside_job_cores([sample(75.0)] * 3, 4, 2) == pytest.approx(0.0)


def test_a_short_run_reads_other_processes_over_its_warm_up_too() -> None:
    """Fifteen steps of a few ms fit inside one ~0.1 s window: with fewer than three readings inside
    the counted steps, the warm-up's and counted steps' readings count, but for the loop's first
    (its start-up) and any after the last counted step (the doctor's probes)."""
    from stave.measure.host import HostSample, other_cores_readings

    def at(step: int) -> HostSample:
        return HostSample(t_ns=step, cpu_system_pct=100.0, cpu_main_pct=100.0, step=step)

    long_run = [at(-1), at(0), at(3), at(5), at(6), at(7), at(9), at(10)]
    assert [s.step for s in other_cores_readings(long_run, {5, 6, 7, 8, 9})] == [5, 6, 7, 9]
    short = [at(-1), at(0), at(0), at(0), at(2), at(9), at(15)]
    assert [s.step for s in other_cores_readings(short, set(range(5, 15)))] == [0, 0, 2, 9]
    assert other_cores_readings(short, set()) == []


def test_cpu_of_a_reaped_child_is_carried_back_to_the_readings_it_ran_in() -> None:
    """A compiler process lives between two scans of the tree: while it runs its core reads as
    another process's, and its CPU reaches the job only when its parent reaps it, as one reading
    where the job used more CPU than the machine was busy. That excess fills the readings before it
    (a false MACHINE_BUSY otherwise); a busy neighbour with no such excess stays as read."""
    from stave.measure.host import HostSample, other_cores_of, other_cores_series, outside_job_cores

    def at(i: int, system: float, main: float, children: float = 0.0) -> HostSample:
        return HostSample(t_ns=i * 100_000_000, cpu_system_pct=system, cpu_main_pct=main,
                          cpu_children_pct=children, step=i)

    # 2 cores: the trainer idle while one core compiles for three readings, then the reap: 3.0 cores
    # of the job's CPU read in one window where the machine was 50 % busy.
    compiling = [at(0, 50.0, 100.0), at(1, 50.0, 0.0), at(2, 50.0, 0.0), at(3, 50.0, 0.0),
                 at(4, 50.0, 0.0, children=400.0), at(5, 50.0, 100.0)]
    assert other_cores_series(compiling, 2) == pytest.approx([0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    assert outside_job_cores(compiling[1:], 2, 2, among=compiling) == pytest.approx(0.0)
    # Only part of the late CPU: the newest readings are filled first, the older keep their "other".
    partial = compiling[:4] + [at(4, 50.0, 0.0, children=300.0)]
    assert other_cores_series(partial, 2) == pytest.approx([0.0, 1.0, 0.0, 0.0, 0.0])
    # A busy loop beside a trainer on one core: one core of other processes in every reading.
    busy = [at(i, 100.0, 100.0) for i in range(5)]
    assert other_cores_of(busy[1:], 2, among=busy) == pytest.approx([1.0] * 4)
    assert outside_job_cores(busy, 2, 2) == pytest.approx(1.0)
