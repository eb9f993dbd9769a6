"""The Linux counter source: reads ``/proc`` and ``/sys/block`` directly.

Each file is opened once and re-read with ``pread`` at offset 0 (the kernel regenerates the text on
every read), which costs a few microseconds where psutil's equivalent costs tens: the sampler holds
the GIL while it parses, so every microsecond here is taken from the user's training loop. The
parsers are pure functions over the file text, tested on strings.

A file the machine does not have (containers hide ``/proc/pressure``; some kernels lack
``/proc/<pid>/task/<tid>/children``) makes its fields ``None``; each absence is logged once at
debug level.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

import psutil

from stave.monitor.counters import MachineCounters, ProcCounters

log = logging.getLogger(__name__)

# /proc/diskstats counts 512-byte sectors whatever the device's real sector size (kernel ABI).
DISKSTATS_SECTOR_BYTES = 512
# First buffer for a /proc file: most are under 4 KB. A read that fills the buffer is retried with
# a bigger one, remembered per file (/proc/stat of a 256-core machine is ~100 KB); the cap bounds
# what a misbehaving file could make us allocate.
_FIRST_READ_BYTES = 4096
_MAX_READ_BYTES = 16 * 1024 * 1024
# Block devices that are not storage the dataset could be read from: loop devices re-read files
# already counted on the disk below them, ram/zram are memory.
_NON_STORAGE_PREFIXES = ("loop", "ram", "zram")


@dataclass(frozen=True)
class ProcPaths:
    """Where the counters live; tests point a member at a missing path to simulate its absence."""

    proc: str = "/proc"
    sys_block: str = "/sys/block"
    pressure: str | None = None

    def pressure_dir(self) -> str:
        """Directory of the pressure-stall files (``<proc>/pressure`` unless set)."""
        return self.pressure if self.pressure is not None else os.path.join(self.proc, "pressure")


# --- Pure parsers --------------------------------------------------------------------------------


def parse_cpu_stat(text: str, cpus: frozenset[int] | None) -> tuple[int, int, int, int | None, int]:
    """``(busy, iowait, total, procs_running, steal)`` from ``/proc/stat``; CPU times in clock ticks.

    With ``cpus`` only those cores' lines are summed (the cores this process may use: a container
    pinned to 4 of 64 cores should see its own cores saturate). Busy excludes idle, iowait and
    steal (time the hypervisor gave to someone else); guest time is already inside user/nice.
    """
    busy = iowait = total = stolen = 0
    seen = False
    # The cpu lines come first; cut there rather than split the long interrupt lines after them.
    end = 0
    while text.startswith("cpu", end):
        nl = text.find("\n", end)
        end = nl + 1 if nl >= 0 else len(text)
    for line in text[:end].splitlines():
        name, _, rest = line.partition(" ")
        if cpus is None:
            if name != "cpu":
                continue
        elif name == "cpu" or not name[3:].isdigit() or int(name[3:]) not in cpus:
            continue
        fields = [int(v) for v in rest.split()[:8]]
        fields += [0] * (8 - len(fields))
        user, nice, system, idle, wait, irq, softirq, steal = fields
        busy += user + nice + system + irq + softirq
        iowait += wait
        stolen += steal
        total += user + nice + system + idle + wait + irq + softirq + steal
        seen = True
    if not seen:
        raise ValueError("no matching cpu lines")
    running = parse_kv_table(text, ("procs_running",)).get("procs_running")
    return busy, iowait, total, running, stolen


def _line_after(text: str, key: str) -> str | None:
    """The rest of the line that starts with ``key`` followed by ``:``, space or tab."""
    start = 0
    while True:
        at = text.find(key, start)
        if at < 0:
            return None
        end = at + len(key)
        if (at == 0 or text[at - 1] == "\n") and end < len(text) and text[end] in ": \t":
            stop = text.find("\n", end)
            return text[end + 1:stop if stop >= 0 else len(text)]
        start = end


def parse_kv_table(text: str, keys: tuple[str, ...]) -> dict[str, int]:
    """Integer values of ``keys`` from ``key: value [kB]`` / ``key value`` tables (meminfo, vmstat).

    Values with a ``kB`` unit are returned in bytes; missing or malformed keys are left out. Each
    key is found with ``str.find`` rather than by splitting every line: /proc/vmstat has ~170
    lines and this runs every tick while holding the GIL.
    """
    out: dict[str, int] = {}
    for key in keys:
        rest = _line_after(text, key)
        if rest is None:
            continue
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    return out


def parse_diskstats_read_bytes(text: str, devices: frozenset[str]) -> int:
    """Bytes read from the named block devices since boot, from ``/proc/diskstats``."""
    sectors = 0
    for line in text.splitlines():
        parts = line.split()
        # major minor name reads reads_merged sectors_read ...
        if len(parts) >= 6 and parts[2] in devices:
            sectors += int(parts[5])
    return sectors * DISKSTATS_SECTOR_BYTES


def parse_pressure_some_us(text: str) -> int:
    """The ``some`` line's cumulative stall time in microseconds, from ``/proc/pressure/*``."""
    for line in text.splitlines():
        if line.startswith("some "):
            for item in line.split()[1:]:
                if item.startswith("total="):
                    return int(item[len("total="):])
    raise ValueError("no 'some ... total=' line")


@dataclass(frozen=True)
class PidStat:
    """The fields of ``/proc/<pid>/stat`` the monitor uses (times in clock ticks, rss in pages)."""

    cpu_ticks: int
    threads: int
    start_ticks: int
    rss_pages: int
    reaped_ticks: int = 0


def _stat_fields(text: str) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name, which may hold spaces and
    parentheses, so they are counted from the last ``)``: field k of proc(5) is ``[k - 3]``."""
    close = text.rfind(")")
    if close < 0:
        raise ValueError("no ')' after the command name")
    return text[close + 1:].split()


def parse_pid_stat(text: str) -> PidStat:
    """Parse ``/proc/<pid>/stat`` (see :func:`_stat_fields`)."""
    fields = _stat_fields(text)
    utime, stime = int(fields[11]), int(fields[12])
    return PidStat(
        cpu_ticks=utime + stime,
        reaped_ticks=int(fields[13]) + int(fields[14]),  # cutime + cstime: waited-for children
        threads=int(fields[17]),
        start_ticks=int(fields[19]),
        rss_pages=int(fields[21]),
    )


def parse_pid_minor_faults(text: str) -> int:
    """``minflt`` (field 10) of ``/proc/<pid>/stat``: the process's minor page faults so far."""
    return int(_stat_fields(text)[7])


def minor_faults() -> int | None:
    """This process's minor page faults so far (all its threads), or None where /proc does not say.

    A step that frees its large temporaries back to the OS (glibc trims the heap's free top, and
    returns chunks above its mmap threshold at once) faults fresh pages in for them in the next
    step, a fault and a zeroing per page: the count over the counted steps says whether the run
    was in that regime (eager attention's ``[seq, seq]`` matrices cost about twice as much there).
    """
    text = ProcfsSource._read_once("/proc/self/stat")
    try:
        return parse_pid_minor_faults(text) if text else None
    except (ValueError, IndexError):
        log.debug("unreadable /proc/self/stat")
        return None


def parse_status_ctx(text: str) -> tuple[int | None, int | None]:
    """Voluntary and involuntary context switches from ``/proc/<pid>/status``."""
    table = parse_kv_table(text, ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"))
    return table.get("voluntary_ctxt_switches"), table.get("nonvoluntary_ctxt_switches")


def storage_devices(sys_block: str) -> frozenset[str] | None:
    """Whole block devices that hold data: not partitions (absent from ``/sys/block``), not
    stacked devices (dm, md: they have ``slaves``, and their reads also count on the disks below,
    so counting both would double them), not loop/ram/zram. ``None`` when sysfs is unreadable."""
    try:
        names = os.listdir(sys_block)
    except OSError as exc:
        log.debug("cannot list %s (%s); disk read rate will be absent", sys_block, exc)
        return None
    chosen = set()
    for name in names:
        if name.startswith(_NON_STORAGE_PREFIXES):
            continue
        try:
            stacked = bool(os.listdir(os.path.join(sys_block, name, "slaves")))
        except OSError:
            stacked = False
        if not stacked:
            chosen.add(name)
    return frozenset(chosen)


# --- The source ----------------------------------------------------------------------------------


class ProcFiles:
    """Open-once, ``pread``-many cache of small kernel text files."""

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}
        self._sizes: dict[str, int] = {}
        self._missing_logged: set[str] = set()

    def read(self, path: str, what: str | None = None) -> str | None:
        """The file's text, or ``None`` when it cannot be read. ``what`` names the counter for a
        one-time debug log; pass ``None`` for files whose absence is normal (an exited process)."""
        fd = self._fds.get(path)
        try:
            if fd is None:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                self._fds[path] = fd
            size = self._sizes.get(path, _FIRST_READ_BYTES)
            while True:
                data = os.pread(fd, size, 0)
                if len(data) < size or size >= _MAX_READ_BYTES:
                    break
                size *= 4  # the text filled the buffer: it may go on
            self._sizes[path] = size
        except OSError as exc:
            self.forget(path)
            if what is not None and path not in self._missing_logged:
                self._missing_logged.add(path)
                log.debug("cannot read %s (%s); %s will be absent", path, exc.strerror or exc, what)
            return None
        if not data:
            # A /proc/<pid> file of an exited process reads empty (or fails) from then on.
            self.forget(path)
            return None
        return data.decode("ascii", errors="replace")

    def forget(self, path: str) -> None:
        """Close and drop the cached descriptor of ``path``, if any."""
        fd = self._fds.pop(path, None)
        self._sizes.pop(path, None)
        if fd is not None:
            os.close(fd)

    def forget_prefix(self, prefix: str) -> None:
        """Close every cached descriptor under ``prefix`` (a process that exited)."""
        for path in [p for p in self._fds if p.startswith(prefix)]:
            self.forget(path)

    def close(self) -> None:
        """Close every cached descriptor."""
        for path in list(self._fds):
            self.forget(path)

    def __del__(self) -> None:
        # A cache held per thread goes with its thread: its descriptors must not outlive it.
        try:
            self.close()
        except OSError:
            pass


class ProcfsSource:
    """Counters from ``/proc`` (Linux). See :class:`stave.monitor.counters.CounterSource`."""

    def __init__(self, paths: ProcPaths | None = None, cpus: frozenset[int] | None = None) -> None:
        self.paths = paths or ProcPaths()
        self._files = ProcFiles()
        self._tick_s = 1.0 / os.sysconf("SC_CLK_TCK")
        self._page_bytes = os.sysconf("SC_PAGE_SIZE")
        if cpus is None:
            try:
                cpus = frozenset(os.sched_getaffinity(0))
            except (AttributeError, OSError):
                cpus = None
        self._cpus = cpus
        self._disks = storage_devices(self.paths.sys_block)
        # CONFIG_PROC_CHILDREN: the kernel lists each thread's children; the thread-group leader's
        # task directory (tid == pid) exists for as long as the process does.
        me = str(os.getpid())
        self._children_files = os.path.exists(os.path.join(self.paths.proc, me, "task", me, "children"))
        if not self._children_files:
            log.debug("no /proc/<pid>/task/<tid>/children; child processes found by a full scan")
        self._logged: set[str] = set()

    def _absent(self, what: str, why: str) -> None:
        if what not in self._logged:
            self._logged.add(what)
            log.debug("%s is absent: %s", what, why)

    def now_s(self) -> float:
        """Seconds since boot: the clock of ``starttime`` in ``/proc/<pid>/stat``."""
        return time.clock_gettime(time.CLOCK_BOOTTIME)

    def machine(self) -> MachineCounters:
        """Read /proc/stat, meminfo, vmstat, diskstats and pressure; absent parts are ``None``."""
        p = self.paths.proc
        values: dict[str, float | int | None] = {}
        text = self._files.read(os.path.join(p, "stat"), "machine CPU")
        if text is not None:
            try:
                busy, wait, total, running, steal = parse_cpu_stat(text, self._cpus)
            except (ValueError, IndexError) as exc:
                self._absent("machine CPU", f"unexpected /proc/stat ({exc})")
            else:
                values.update(
                    cpu_busy_s=busy * self._tick_s,
                    cpu_iowait_s=wait * self._tick_s,
                    cpu_steal_s=steal * self._tick_s,
                    cpu_total_s=total * self._tick_s,
                    procs_running=running,
                )
        text = self._files.read(os.path.join(p, "meminfo"), "available memory")
        if text is not None:
            table = parse_kv_table(text, ("MemAvailable", "Cached"))
            values["mem_available_bytes"] = table.get("MemAvailable")
            values["page_cache_bytes"] = table.get("Cached")
        text = self._files.read(os.path.join(p, "vmstat"), "swap activity")
        if text is not None:
            table = parse_kv_table(text, ("pswpin", "pswpout"))
            if "pswpin" in table and "pswpout" in table:
                values["swap_in_bytes"] = table["pswpin"] * self._page_bytes
                values["swap_out_bytes"] = table["pswpout"] * self._page_bytes
        if self._disks is not None:
            text = self._files.read(os.path.join(p, "diskstats"), "disk read rate")
            if text is not None:
                values["disk_read_bytes"] = parse_diskstats_read_bytes(text, self._disks)
        pressure = self.paths.pressure_dir()
        for kind in ("cpu", "memory", "io"):
            text = self._files.read(os.path.join(pressure, kind), f"{kind} pressure stall")
            if text is not None:
                try:
                    values[f"psi_{kind}_some_s"] = parse_pressure_some_us(text) / 1e6
                except ValueError as exc:
                    self._absent(f"{kind} pressure stall", str(exc))
        return MachineCounters(**values)  # type: ignore[arg-type]

    def process(self, pid: int, with_ctx: bool) -> ProcCounters | None:
        """Read ``/proc/<pid>/stat`` (and ``status`` for context switches); ``None`` once it exited."""
        base = os.path.join(self.paths.proc, str(pid))
        text = self._files.read(os.path.join(base, "stat"))
        if text is None:
            self._files.forget_prefix(base + os.sep)
            return None
        try:
            stat = parse_pid_stat(text)
        except (ValueError, IndexError) as exc:
            self._absent(f"process {pid}", f"unexpected stat line ({exc})")
            return None
        vol = invol = None
        if with_ctx:
            status = self._files.read(os.path.join(base, "status"), "context switches")
            if status is not None:
                vol, invol = parse_status_ctx(status)
        return ProcCounters(
            cpu_s=stat.cpu_ticks * self._tick_s,
            rss_bytes=stat.rss_pages * self._page_bytes,
            threads=stat.threads,
            started_s=stat.start_ticks * self._tick_s,
            ctx_voluntary=vol,
            ctx_involuntary=invol,
            reaped_cpu_s=stat.reaped_ticks * self._tick_s,
        )

    def descendants(self, pid: int) -> list[int]:
        """All descendants, from ``/proc/<pid>/task/<tid>/children`` (cheap: no scan of every
        process on the machine), falling back to psutil's full scan where the kernel lacks it."""
        if self._children_files:
            found: list[int] = []
            frontier = [pid]
            while frontier:
                kids = self._children_of(frontier.pop())
                found.extend(kids)
                frontier.extend(kids)
            return found
        try:
            return [c.pid for c in psutil.Process(pid).children(recursive=True)]
        except psutil.Error as exc:
            log.debug("cannot list children of %d: %s", pid, exc)
            return []

    def _children_of(self, pid: int) -> list[int]:
        task_dir = os.path.join(self.paths.proc, str(pid), "task")
        try:
            tids = os.listdir(task_dir)
        except OSError:
            return []  # the process exited while we walked the tree
        kids: list[int] = []
        for tid in tids:
            text = self._read_once(os.path.join(task_dir, tid, "children"))
            if text:
                kids.extend(int(v) for v in text.split())
        return kids

    @staticmethod
    def _read_once(path: str) -> str | None:
        # Not cached: threads come and go, and this runs about once a second.
        try:
            with open(path, encoding="ascii") as handle:
                return handle.read()
        except OSError:
            return None  # a thread that exited between listdir and open

    def close(self) -> None:
        """Close the cached file descriptors."""
        self._files.close()
