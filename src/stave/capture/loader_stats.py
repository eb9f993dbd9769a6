"""Per-sample accounting of data loading, inside loader workers and in the main process.

The DataLoader's fetchers (``torch.utils.data._utils.fetch``) are replaced by timed versions
with the same semantics, and torchvision's ``Compose`` times each transform while a fetch is
running (patched once the script has imported torchvision), so a report can say which stage of
sample loading costs what. Wall time and the thread's CPU time are both kept: their difference is
time off-CPU (blocked on reads, sleeping).

Each worker process keeps a :class:`LoaderStats` and writes it, atomically and at most every
:data:`FLUSH_INTERVAL_S`, to a JSON file in the doctor's stats directory, plus once more when the
worker exits; the main process reads the files at the end. A worker that is killed still leaves
its last flush.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import sys
import threading
import time
from typing import Any

from stave.measure.pipeline import StageStat, WorkerStats
from stave.monitor.procfs import ProcFiles

log = logging.getLogger(__name__)

# Often enough that a killed worker loses little, rarely enough that the write (a few hundred
# bytes, atomically renamed) is noise next to loading a batch.
FLUSH_INTERVAL_S = 0.5

_local = threading.local()


def _thread_files() -> ProcFiles:
    """This thread's open-once, ``pread``-many cache of its ``/proc/thread-self`` files.

    Opening the files per fetch cost two more syscalls and a path walk each time (about 25 us a
    fetch, on every batch of a loop that loads in the main process). The descriptors name the
    thread that opened them, so each thread keeps its own (closed when the thread ends), and a
    forked worker drops the copies it inherited and opens its own.
    """
    files = getattr(_local, "proc_files", None)
    pid = os.getpid()
    if files is None or getattr(_local, "proc_pid", None) != pid:
        files = _local.proc_files = ProcFiles()
        _local.proc_pid = pid
    return files


def _io_counters() -> dict[str, int] | None:
    """This thread's I/O counters (/proc/thread-self/io): syscalls and bytes, or None if hidden."""
    text = _thread_files().read("/proc/thread-self/io")
    if text is None:
        return None
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if value.strip().isdigit():
            out[key.strip()] = int(value)
    # This read is itself one read syscall of len(text) chars, which the next reading will include.
    out["_self_chars"] = len(text)
    return out


def _run_delay_ns() -> int | None:
    """Time this thread has spent runnable but waiting for a core (schedstat field 2), or None."""
    text = _thread_files().read("/proc/thread-self/schedstat")
    if text is None:
        return None
    fields = text.split()
    return int(fields[1]) if len(fields) >= 2 and fields[1].isdigit() else None


class LoaderStats:
    """Accumulates stage times and I/O for one process (a worker, or the main process)."""

    def __init__(self, worker_id: int, loader_id: int, out_path: str | None) -> None:
        self.worker_id = worker_id
        self.loader_id = loader_id
        self.out_path = out_path
        self.created_ns = time.perf_counter_ns()
        self.samples = 0
        self.batches = 0
        self.getitem_wall_ns = 0
        self.getitem_cpu_ns = 0
        self.stages: dict[str, StageStat] = {}
        self.opens: int | None = 0
        self.read_calls: int | None = 0
        self.read_chars: int | None = 0
        self.read_bytes: int | None = 0
        self.run_delay_ns: int | None = 0
        self.first_batch_samples = 0
        self.first_batch_wall_ns = 0
        self.first_batch_cpu_ns = 0
        self._last_flush_ns = 0

    def _spent(self) -> tuple[int, int, int]:
        collate = self.stages.get("collate")
        return (self.samples, self.getitem_wall_ns + (collate.wall_ns if collate else 0),
                self.getitem_cpu_ns + (collate.cpu_ns if collate else 0))

    def begin_fetch(self) -> tuple[int, int, int] | None:
        """Before a fetch: what was spent so far, when this is the process's first fetch (else None)."""
        return self._spent() if self.batches == 0 else None

    def end_fetch(self, before: tuple[int, int, int] | None) -> None:
        """After a fetch: the first one's samples, wall and CPU are kept apart (see WorkerStats)."""
        if before is None or self.batches != 1:
            return
        after = self._spent()
        self.first_batch_samples, self.first_batch_wall_ns, self.first_batch_cpu_ns = (
            a - b for a, b in zip(after, before))

    def stage(self, name: str, samples: int, wall_ns: int, cpu_ns: int) -> None:
        """Add time to a stage."""
        st = self.stages.get(name)
        if st is None:
            st = self.stages[name] = StageStat(name)
        st.samples += samples
        st.wall_ns += wall_ns
        st.cpu_ns += cpu_ns

    def add_io(self, before: dict[str, int] | None, after: dict[str, int] | None) -> None:
        """Add the I/O counter deltas of one fetch; absent counters stay absent (None)."""
        if before is None or after is None:
            self.read_calls = self.read_chars = self.read_bytes = None
            return
        own = {"syscr": 1, "rchar": before.get("_self_chars", 0), "read_bytes": 0}
        for attr, key in (("read_calls", "syscr"), ("read_chars", "rchar"), ("read_bytes", "read_bytes")):
            current = getattr(self, attr)
            if current is not None and key in before and key in after:
                setattr(self, attr, current + max(0, after[key] - before[key] - own[key]))
            else:
                setattr(self, attr, None)

    def add_run_delay(self, before: int | None, after: int | None) -> None:
        """Add one fetch's wait for a core; absent on a kernel without schedstats stays absent."""
        if before is None or after is None or self.run_delay_ns is None:
            self.run_delay_ns = None
        else:
            self.run_delay_ns += max(0, after - before)

    def to_worker_stats(self) -> WorkerStats:
        """Snapshot as the measurement type."""
        return WorkerStats(
            worker_id=self.worker_id,
            pid=os.getpid(),
            loader_id=self.loader_id,
            samples=self.samples,
            batches=self.batches,
            getitem_wall_ns=self.getitem_wall_ns,
            getitem_cpu_ns=self.getitem_cpu_ns,
            stages=[StageStat(s.name, s.samples, s.wall_ns, s.cpu_ns) for s in self.stages.values()],
            opens=self.opens,
            read_calls=self.read_calls,
            read_chars=self.read_chars,
            read_bytes=self.read_bytes,
            run_delay_ns=self.run_delay_ns,
            alive_ns=time.perf_counter_ns() - self.created_ns,
            first_batch_samples=self.first_batch_samples,
            first_batch_wall_ns=self.first_batch_wall_ns,
            first_batch_cpu_ns=self.first_batch_cpu_ns,
        )

    def maybe_flush(self, force: bool = False) -> None:
        """Write the stats file if the interval passed (or ``force``); never raises into the loader."""
        if self.out_path is None:
            return
        now = time.perf_counter_ns()
        if not force and now - self._last_flush_ns < FLUSH_INTERVAL_S * 1e9:
            return
        self._last_flush_ns = now
        from stave.measure.serialize import to_dict

        tmp = f"{self.out_path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump(to_dict(self.to_worker_stats()), handle)
            os.replace(tmp, self.out_path)
        except OSError as exc:
            # A full disk must not break the user's data loading; the report will lack this worker.
            log.warning("could not write loader stats to %s: %s", self.out_path, exc)


# --- The process-wide current stats and the "inside a fetch" flag -------------------------------

_current: LoaderStats | None = None


def current() -> LoaderStats | None:
    """The stats object of this process, if instrumentation is installed."""
    return _current


def set_current(stats: LoaderStats | None) -> None:
    """Install (or clear) the stats object of this process."""
    global _current
    _current = stats


def in_fetch() -> bool:
    """True while this thread is inside an instrumented fetch."""
    return getattr(_local, "in_fetch", False)


def _begin_getitems() -> tuple[int, int]:
    _local.transform_wall_ns = 0
    _local.transform_cpu_ns = 0
    return time.perf_counter_ns(), time.thread_time_ns()


def _end_getitems(stats: LoaderStats, start: tuple[int, int], samples: int) -> None:
    wall = time.perf_counter_ns() - start[0]
    cpu = time.thread_time_ns() - start[1]
    stats.samples += samples
    stats.getitem_wall_ns += wall
    stats.getitem_cpu_ns += cpu
    # "load" is what __getitem__ did besides its transforms: file reads and decode, mostly.
    stats.stage("load", samples, max(0, wall - _local.transform_wall_ns), max(0, cpu - _local.transform_cpu_ns))


def _timed_getitem(stats: LoaderStats, get: Any, arg: Any, samples: int = 1) -> Any:
    start = _begin_getitems()
    item = get(arg)
    _end_getitems(stats, start, samples)
    return item


def _timed_getitems(stats: LoaderStats, get: Any, indices: Any) -> list[Any]:
    """``[get(i) for i in indices]``, timed as one span. The stages keep only sums, and clocks read
    per sample cost about as much as a small sample's own fetch (two wall and two thread-CPU reads,
    the latter a system call each, and the bookkeeping: +3 us on a 4.5 us TensorDataset sample),
    which the loading's per-sample time would then carry."""
    start = _begin_getitems()
    data = [get(i) for i in indices]
    _end_getitems(stats, start, len(data))
    return data


def _timed_collate(stats: LoaderStats, collate_fn: Any, data: Any, samples: int) -> Any:
    t0 = time.perf_counter_ns()
    c0 = time.thread_time_ns()
    out = collate_fn(data)
    stats.stage("collate", samples, time.perf_counter_ns() - t0, time.thread_time_ns() - c0)
    return out


def timed_map_fetch(fetcher: Any, possibly_batched_index: Any) -> Any:
    """``_MapDatasetFetcher.fetch`` with per-sample timing (same semantics as torch's)."""
    stats = _current
    if stats is None or in_fetch():
        return _ORIGINALS["map"](fetcher, possibly_batched_index)
    patch_loaded_transforms()
    _local.in_fetch = True
    # The schedstat read outside the I/O window: the window's only read of its own is io's.
    delay_before = _run_delay_ns()
    io_before = _io_counters()
    first = stats.begin_fetch()
    try:
        dataset = fetcher.dataset
        if fetcher.auto_collation:
            if hasattr(dataset, "__getitems__") and dataset.__getitems__:
                # A batched getter: time it as one call spread over its samples.
                n = len(possibly_batched_index)
                t0 = time.perf_counter_ns()
                c0 = time.thread_time_ns()
                data = dataset.__getitems__(possibly_batched_index)
                stats.samples += n
                wall = time.perf_counter_ns() - t0
                cpu = time.thread_time_ns() - c0
                stats.getitem_wall_ns += wall
                stats.getitem_cpu_ns += cpu
                stats.stage("load", n, wall, cpu)
            else:
                data = _timed_getitems(stats, dataset.__getitem__, possibly_batched_index)
            n = len(data)
        else:
            # batch_size=None: one __getitem__ per index the sampler gives; a BatchSampler's index
            # is a list, and the call fetches that many samples at once (whole-batch indexing).
            n = _index_samples(possibly_batched_index)
            data = _timed_getitem(stats, dataset.__getitem__, possibly_batched_index, n)
        out = _timed_collate(stats, fetcher.collate_fn, data, n)
        stats.batches += 1
        stats.end_fetch(first)
        return out
    finally:
        _local.in_fetch = False
        stats.add_io(io_before, _io_counters())
        stats.add_run_delay(delay_before, _run_delay_ns())
        stats.maybe_flush()


def _index_samples(index: Any) -> int:
    """Samples one ``__getitem__(index)`` fetches: the length of a list, range or 1-d tensor/array of
    indices (what a BatchSampler or a batched sampler yields), else 1. A tuple stays one key: samplers
    yield ``(index, scale)`` or ``(file, offset)`` pairs for a single sample."""
    if isinstance(index, (list, range)):
        return max(1, len(index))
    shape = getattr(index, "shape", None)
    if shape is not None and len(shape) == 1:
        return max(1, int(shape[0]))
    return 1


def timed_iterable_fetch(fetcher: Any, possibly_batched_index: Any) -> Any:
    """``_IterableDatasetFetcher.fetch`` with per-sample timing (same semantics as torch's)."""
    stats = _current
    if stats is None or in_fetch():
        return _ORIGINALS["iterable"](fetcher, possibly_batched_index)
    patch_loaded_transforms()
    if fetcher.ended:
        raise StopIteration
    _local.in_fetch = True
    # The schedstat read outside the I/O window: the window's only read of its own is io's.
    delay_before = _run_delay_ns()
    io_before = _io_counters()
    first = stats.begin_fetch()
    try:
        get = fetcher.dataset_iter.__next__
        if fetcher.auto_collation:
            data = []
            start = _begin_getitems()
            try:
                for _ in possibly_batched_index:
                    try:
                        data.append(get())
                    except StopIteration:
                        fetcher.ended = True
                        break
            finally:
                _end_getitems(stats, start, len(data))
            if len(data) == 0 or (fetcher.drop_last and len(data) < len(possibly_batched_index)):
                raise StopIteration
            n = len(data)
        else:
            data = _timed_getitem(stats, lambda _unused: get(), None)
            n = 1
        out = _timed_collate(stats, fetcher.collate_fn, data, n)
        stats.batches += 1
        stats.end_fetch(first)
        return out
    finally:
        _local.in_fetch = False
        stats.add_io(io_before, _io_counters())
        stats.add_run_delay(delay_before, _run_delay_ns())
        stats.maybe_flush()


def _stage_name(transform: Any, seen: dict[str, int]) -> str:
    name = type(transform).__name__
    if name == "function":
        name = getattr(transform, "__name__", "function")
    seen[name] = seen.get(name, 0) + 1
    return name if seen[name] == 1 else f"{name}#{seen[name]}"


def _run_transforms(transforms: list[Any], value: Any, unpack: bool) -> Any:
    stats = _current
    seen: dict[str, int] = {}
    for t in transforms:
        t0 = time.perf_counter_ns()
        c0 = time.thread_time_ns()
        value = t(*value) if unpack else t(value)
        wall = time.perf_counter_ns() - t0
        cpu = time.thread_time_ns() - c0
        _local.transform_wall_ns = getattr(_local, "transform_wall_ns", 0) + wall
        _local.transform_cpu_ns = getattr(_local, "transform_cpu_ns", 0) + cpu
        if stats is not None:
            stats.stage(_stage_name(t, seen), 1, wall, cpu)
        if unpack and not isinstance(value, tuple):
            value = (value,)
    return value


def timed_compose_call(compose: Any, img: Any) -> Any:
    """``torchvision.transforms.Compose.__call__``, timing each transform inside a fetch."""
    if not in_fetch() or getattr(_local, "in_compose", False):
        return _ORIGINALS["compose"](compose, img)
    _local.in_compose = True
    try:
        return _run_transforms(compose.transforms, img, unpack=False)
    finally:
        _local.in_compose = False


def timed_compose_v2_forward(compose: Any, *inputs: Any) -> Any:
    """``torchvision.transforms.v2.Compose.forward`` with the same per-transform timing."""
    if not in_fetch() or getattr(_local, "in_compose", False) or len(inputs) > 1:
        return _ORIGINALS["compose_v2"](compose, *inputs)
    _local.in_compose = True
    try:
        return _run_transforms(compose.transforms, inputs[0], unpack=False)
    finally:
        _local.in_compose = False


def counting_open(*args: Any, **kwargs: Any) -> Any:
    """``open`` that counts calls made inside a fetch (many small files show as many opens)."""
    stats = _current
    if stats is not None and stats.opens is not None and in_fetch():
        stats.opens += 1
    return _ORIGINALS["open"](*args, **kwargs)


_ORIGINALS: dict[str, Any] = {}


def install() -> None:
    """Patch the fetchers and ``open`` in this process (idempotent); ``Compose`` once torchvision is loaded."""
    if _ORIGINALS:
        return
    from torch.utils.data._utils import fetch

    _ORIGINALS["map"] = fetch._MapDatasetFetcher.fetch
    _ORIGINALS["iterable"] = fetch._IterableDatasetFetcher.fetch
    fetch._MapDatasetFetcher.fetch = timed_map_fetch
    fetch._IterableDatasetFetcher.fetch = timed_iterable_fetch
    _ORIGINALS["open"] = builtins.open
    builtins.open = counting_open
    patch_loaded_transforms()


# torchvision's Compose classes: (key in _ORIGINALS, module, method, its timed replacement).
_COMPOSE_PATCHES = (
    ("compose", "torchvision.transforms", "__call__", timed_compose_call),
    ("compose_v2", "torchvision.transforms.v2", "forward", timed_compose_v2_forward),
)


def patch_loaded_transforms() -> None:
    """Time torchvision's ``Compose`` (v1 and v2) once the script itself has imported it.

    Called at :func:`install` and at the start of every timed fetch (two dictionary lookups once
    patched). Importing torchvision here instead cost every doctor run 2.7 s (it pulls in
    torch._dynamo) whether the script used torchvision or not, and every spawned loader worker the
    same at its start, which DATA_WORKER_STARTUP would then have measured as the job's.
    """
    for key, module, method, timed in _COMPOSE_PATCHES:
        compose = getattr(sys.modules.get(module), "Compose", None)
        if key not in _ORIGINALS and compose is not None:
            _ORIGINALS[key] = getattr(compose, method)
            setattr(compose, method, timed)


def uninstall() -> None:
    """Restore everything :func:`install` patched."""
    if not _ORIGINALS:
        return
    from torch.utils.data._utils import fetch

    fetch._MapDatasetFetcher.fetch = _ORIGINALS.pop("map")
    fetch._IterableDatasetFetcher.fetch = _ORIGINALS.pop("iterable")
    builtins.open = _ORIGINALS.pop("open")
    for key, module, method, _timed in _COMPOSE_PATCHES:
        if key in _ORIGINALS:
            setattr(sys.modules[module].Compose, method, _ORIGINALS.pop(key))
    _ORIGINALS.clear()


class WorkerInit:
    """A picklable ``worker_init_fn`` that instruments the worker, then calls the user's own.

    Works for fork (the patches are inherited but the stats object is per worker) and for spawn
    and forkserver (the worker imports stave fresh and installs the patches here).
    """

    def __init__(self, user_fn: Any, stats_dir: str, loader_id: int) -> None:
        self.user_fn = user_fn
        self.stats_dir = stats_dir
        self.loader_id = loader_id

    def __call__(self, worker_id: int) -> None:
        install()
        path = os.path.join(self.stats_dir, f"loader{self.loader_id}-worker{worker_id}-{os.getpid()}.json")
        stats = LoaderStats(worker_id, self.loader_id, path)
        set_current(stats)
        stats.maybe_flush(force=True)
        # multiprocessing runs its Finalize callbacks when a worker exits normally (it skips atexit),
        # so the last counts of a cleanly shut-down worker are written.
        from multiprocessing import util

        util.Finalize(stats, stats.maybe_flush, kwargs={"force": True}, exitpriority=10)
        if self.user_fn is not None:
            self.user_fn(worker_id)


def read_worker_files(stats_dir: str) -> list[WorkerStats]:
    """Read every worker stats file in ``stats_dir`` (files we wrote; malformed ones are skipped)."""
    from stave.errors import FormatError
    from stave.measure.serialize import from_dict

    out: list[WorkerStats] = []
    try:
        names = sorted(os.listdir(stats_dir))
    except OSError:
        return out
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(stats_dir, name), encoding="utf-8") as handle:
                out.append(from_dict(WorkerStats, json.load(handle), name))
        except (OSError, ValueError, FormatError) as exc:
            log.warning("skipping unreadable worker stats %s: %s", name, exc)
    return out
