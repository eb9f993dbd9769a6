"""Columnar tables of one trace: host events and GPU activities as numpy arrays (int64 ns).

A multi-GB trace has millions of events; as Python objects they would take several times the file's
size. Here each decoded piece is turned into a few numpy columns at once and the event structs are
dropped, so memory grows by ~40 bytes per kept event and nothing else. Names are interned once.

Times: Kineto writes microseconds, as integers or with a fractional part (newer PyTorch). They are
converted to integer nanoseconds from the JSON text itself (:mod:`stave.trace.times`), never
through a float, so a 19-digit timestamp keeps every digit.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stave.errors import FormatError
from stave.trace.events import Event, EventArgs
from stave.trace.kernels import operand_precision
from stave.trace.reader import ReadStats, TraceReader
from stave.trace.times import event_times_ns

log = logging.getLogger(__name__)

# Host event categories (codes kept in ``HostTable.cat``).
CPU_OP, ANNOTATION, PYTHON, RUNTIME = 0, 1, 2, 3
HOST_CATS: dict[str, int] = {
    "cpu_op": CPU_OP,
    "operator": CPU_OP,
    "Operator": CPU_OP,
    "user_annotation": ANNOTATION,
    "python_function": PYTHON,
    "cuda_runtime": RUNTIME,
    "cuda_driver": RUNTIME,
    "Runtime": RUNTIME,
    "Driver": RUNTIME,
}
# GPU activity kinds (codes kept in ``GpuTable.kind``).
KERNEL, MEMCPY, MEMSET = 0, 1, 2
SYNC_KIND = 3
# Host ops that carry a stream argument, kept beside the cuda_sync records for HTA's rows.
HOST_STREAM_KIND = 4
GPU_CATS: dict[str, int] = {
    "kernel": KERNEL,
    "Kernel": KERNEL,
    "gpu_memcpy": MEMCPY,
    "Memcpy": MEMCPY,
    "gpu_memset": MEMSET,
    "Memset": MEMSET,
}
# CUPTI's synchronization records ("Event Sync", "Stream Sync", "Context Sync"): the device side of a
# host sync call. Kept apart (``TraceData.gpu_sync``): they are waits, not GPU work, but HTA counts
# them among its GPU rows, and the HTA-comparable numbers (stave.trace.hta_metrics) must too.
SYNC_CAT = "cuda_sync"
# Host ops whose launched kernels are matmul-like (GEMM, convolution, attention): the ops whose
# operand dtypes are read.
_MATMUL_OP = re.compile(
    r"aten::(?:mm|addmm|_addmm_activation|bmm|baddbmm|addbmm|matmul|linear|mv|addmv|dot|einsum|_int_mm|_scaled_mm"
    r"|\w*conv\w*|\w*attention\w*)$"
)
# Distinct names kept before new names share one bucket: real traces have well under 100k distinct
# op and kernel names; more means generated names, and the table would dominate memory.
MAX_DISTINCT_NAMES = 500_000
OVERFLOW_NAME = "(other names: name table full)"
# [memory] events: "Device Type" 1 is CUDA (c10::DeviceType), 0 is CPU.
CUDA_DEVICE_TYPE = 1

_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
_SKIPPED_PHASES = frozenset({"X", "s", "f", "t"})


@dataclass
class HostTable:
    """Host-side spans (ops, annotations, Python frames, CUDA runtime calls), one row each."""

    start: np.ndarray
    end: np.ndarray
    thread: np.ndarray
    name: np.ndarray
    cat: np.ndarray
    corr: np.ndarray

    def __len__(self) -> int:
        return len(self.start)


@dataclass
class GpuTable:
    """GPU activities (kernels, memcpy, memset), one row each; ``nbytes`` is -1 when unknown."""

    start: np.ndarray
    end: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    name: np.ndarray
    kind: np.ndarray
    corr: np.ndarray
    nbytes: np.ndarray

    def __len__(self) -> int:
        return len(self.start)


@dataclass
class TraceData:
    """Everything the analyses read from one trace file."""

    path: str
    stats: ReadStats
    names: list[str]
    threads: list[tuple[Any, Any]]
    thread_names: dict[tuple[Any, Any], str]
    host: HostTable
    gpu: GpuTable
    profiler_span: tuple[int, int] | None
    memory_peak_bytes: dict[str, int] = field(default_factory=dict)
    skipped_no_time: int = 0
    other_phases: dict[str, int] = field(default_factory=dict)
    # cuda_sync records (kind SYNC_KIND) and host ops naming a stream (HOST_STREAM_KIND, no
    # correlation id), only for the HTA-comparable numbers.
    gpu_sync: GpuTable | None = None
    # GPU activity name id -> "low" | "fp32": the dtype of the ops that launched it, where the trace
    # records operand types (record_shapes=True) and all its launches agree.
    operands_by_name: dict[int, str] = field(default_factory=dict)

    @property
    def metadata(self) -> dict[str, Any]:
        """Top-level keys of the file other than ``traceEvents``."""
        return self.stats.metadata

    def step_name_ids(self) -> dict[int, int]:
        """Name id -> step number, for every ``ProfilerStep#N`` name."""
        out = {}
        for i, n in enumerate(self.names):
            m = _STEP_NAME.match(n)
            if m:
                out[i] = int(m.group(1))
        return out

    def name_ids_where(self, predicate: Any) -> np.ndarray:
        """Sorted ids of the names for which ``predicate(name)`` is true."""
        return np.array([i for i, n in enumerate(self.names) if predicate(n)], dtype=np.int64)


class _Builder:
    def __init__(self) -> None:
        self.name_ids: dict[str, int] = {}
        self.thread_ids: dict[tuple[Any, Any], int] = {}
        self.thread_names: dict[tuple[Any, Any], str] = {}
        self.host_parts: list[tuple[np.ndarray, ...]] = []
        self.gpu_parts: list[tuple[np.ndarray, ...]] = []
        self.sync_parts: list[tuple[np.ndarray, ...]] = []
        self.sizes_by_corr: dict[int, int] = {}
        # External id of an op -> its operands' precision; the GPU rows' External ids, per part.
        self.operands_by_ext: dict[int, str] = {}
        self.gpu_ext_parts: list[np.ndarray] = []
        self.matmul_op_names: dict[int, bool] = {}
        self.profiler_span: list[int] = []
        self.memory_peak: dict[str, int] = {}
        self.skipped_no_time = 0
        self.other_phases: dict[str, int] = {}

    def _names(self, names: list[str]) -> list[int]:
        return _intern(self.name_ids, names, MAX_DISTINCT_NAMES, OVERFLOW_NAME)

    def add(self, events: list[Event]) -> None:
        xs = [e for e in events if e.ph == "X"]
        if len(xs) != len(events):
            # Flow arrows ("s"/"f") are a third of a GPU trace and carry nothing stave reads.
            self._add_other([e for e in events if e.ph not in _SKIPPED_PHASES])
        # Events without a timestamp are dropped (and counted) by _times, with those whose time is
        # unusable: no pass over the whole piece just to find them.
        host = [e for e in xs if e.cat in HOST_CATS]
        gpu = [e for e in xs if e.cat in GPU_CATS]
        if len(host) + len(gpu) != len(xs):
            rest = [e for e in xs if e.cat not in HOST_CATS and e.cat not in GPU_CATS]
            # The profiler's own "Trace" span: where recording started and stopped.
            trace = [e for e in rest if e.cat == "Trace"]
            start, end = self._times(trace)
            for lo, hi in zip(start.tolist(), end.tolist()):
                self.profiler_span += [lo, hi]
            syncs = [e for e in rest if e.cat == SYNC_CAT]
            if syncs:
                start, end = self._times(syncs)
                if syncs:
                    self.sync_parts.append(self._gpu_columns(syncs, start, end, SYNC_KIND))
            others = [e for e in rest if e.cat != "Trace" and e.cat != SYNC_CAT]
            if others:
                # Events of categories stave does not read: only those without a usable time count.
                self.skipped_no_time += int(len(others) - event_times_ns(others)[1].sum())
        if host:
            start, end = self._times(host)
            if host:
                self._add_host(host, start, end)
        if gpu:
            start, end = self._times(gpu)
            if gpu:
                self._add_gpu(gpu, start, end)

    def _times(self, events: list[Event]) -> tuple[np.ndarray, np.ndarray]:
        """Start and end (int ns) of ``events``; drops (in place, counted) those whose time is not usable."""
        start, ok, dur = event_times_ns(events)
        if not ok.all():
            # Times that are not numbers, or that no clock produces (they would overflow int64 ns).
            keep = np.flatnonzero(ok)
            self.skipped_no_time += len(events) - len(keep)
            events[:] = [events[i] for i in keep.tolist()]
            start, dur = start[keep], dur[keep]
        return start, start + dur

    def _add_other(self, events: Any) -> None:
        for e in events:
            if e.ph == "M":
                if e.name == "thread_name" and e.args is not None and e.args.name is not None:
                    self.thread_names[(e.pid, e.tid)] = e.args.name
            elif e.ph in ("i", "I") and e.name == "[memory]" and e.args is not None:
                a = e.args
                if a.total_allocated is not None:
                    key = "cuda" if a.device_type == CUDA_DEVICE_TYPE else "cpu"
                    if a.device_type == CUDA_DEVICE_TYPE and a.device_id is not None:
                        key = f"cuda:{a.device_id}"
                    self.memory_peak[key] = max(self.memory_peak.get(key, 0), a.total_allocated)
            elif e.ph not in ("i", "I", "C"):
                self.other_phases[e.ph] = self.other_phases.get(e.ph, 0) + 1

    def _add_host(self, host: list[Event], start: np.ndarray, end: np.ndarray) -> None:
        pids = {e.pid for e in host}
        # One process (the usual case): thread keys without building a tuple per event.
        keys = [(next(iter(pids)), t) for t in {e.tid for e in host}] if len(pids) == 1 else None
        if keys is not None:
            local = dict(zip((k[1] for k in keys), _intern(self.thread_ids, keys, MAX_DISTINCT_NAMES,
                                                            ("", "(other threads)"))))
            thread = [local[e.tid] for e in host]
        else:
            thread = _intern(self.thread_ids, [(e.pid, e.tid) for e in host], MAX_DISTINCT_NAMES,
                             ("", "(other threads)"))
        cats = [HOST_CATS[e.cat] for e in host]
        corr = [
            a.correlation if (a := e.args) is not None and a.correlation is not None else -1 for e in host
        ]
        names = self._names([e.name for e in host])
        matmul_op = self.matmul_op_names
        with_stream: list[int] = []
        for i, (e, name) in enumerate(zip(host, names)):
            a = e.args
            if a is None:
                continue
            if a.stream is not None and a.correlation is None:
                with_stream.append(i)
            if a.size is not None and a.correlation is not None:
                size = _as_int(a.size)
                if size is not None:
                    self.sizes_by_corr[a.correlation] = size
            if a.external_id is not None and a.input_types:
                # Only matmul-like ops: their kernels are the ones whose precision the rules read,
                # and looking at every op's dtypes would cost the reader a third on such traces.
                is_matmul = matmul_op.get(name)
                if is_matmul is None:
                    is_matmul = matmul_op[name] = bool(_MATMUL_OP.match(e.name))
                if is_matmul:
                    operands = operand_precision(a.input_types)
                    if operands is not None:
                        self.operands_by_ext[a.external_id] = operands
        if with_stream:
            # Host ops that name a stream (Inductor's Triton launches): HTA counts them as GPU rows.
            rows = [host[i] for i in with_stream]
            cols = self._gpu_columns(rows, start[with_stream], end[with_stream], HOST_STREAM_KIND)
            self.sync_parts.append(cols[:6] + (np.full(len(rows), -1, np.int64), cols[7]))
        self.host_parts.append(
            (
                start,
                end,
                np.asarray(thread, dtype=np.int32),
                np.asarray(names, dtype=np.int32),
                np.asarray(cats, dtype=np.int8),
                np.asarray(corr, dtype=np.int64),
            )
        )

    def _add_gpu(self, gpu: list[Event], start: np.ndarray, end: np.ndarray) -> None:
        self.gpu_ext_parts.append(
            np.asarray([a.external_id if (a := e.args) is not None and a.external_id is not None else -1
                        for e in gpu], dtype=np.int64)
        )
        self.gpu_parts.append(self._gpu_columns(gpu, start, end, None))

    def _gpu_columns(self, gpu: list[Event], start: np.ndarray, end: np.ndarray,
                     kind: int | None) -> tuple[np.ndarray, ...]:
        """The GpuTable columns of ``gpu`` (kind from the category unless given)."""
        args = [e.args or _NO_ARGS for e in gpu]
        # Device and stream from args; Kineto also puts them in pid/tid, the fallback.
        device = [a.device if a.device is not None else (e.pid if type(e.pid) is int else -1)
                  for a, e in zip(args, gpu)]
        stream = [a.stream if type(a.stream) is int else _stream_of(a.stream, e.tid) for a, e in zip(args, gpu)]
        corr = [a.correlation if a.correlation is not None else -1 for a in args]
        nbytes = [a.nbytes if a.nbytes is not None else -1 for a in args]
        kinds = [GPU_CATS[e.cat] for e in gpu] if kind is None else [kind] * len(gpu)
        return (
            start,
            end,
            np.asarray(device, dtype=np.int32),
            np.asarray(stream, dtype=np.int64),
            np.asarray(self._names([e.name for e in gpu]), dtype=np.int32),
            np.asarray(kinds, dtype=np.int8),
            np.asarray(corr, dtype=np.int64),
            np.asarray(nbytes, dtype=np.int64),
        )

    def finish(self, path: str, stats: ReadStats) -> TraceData:
        host = _concat(self.host_parts, (np.int64, np.int64, np.int32, np.int32, np.int8, np.int64))
        gpu_dtypes = (np.int64, np.int64, np.int32, np.int64, np.int32, np.int8, np.int64, np.int64)
        gpu = _concat(self.gpu_parts, gpu_dtypes)
        sync = GpuTable(*_concat(self.sync_parts, gpu_dtypes))
        self.host_parts.clear()
        self.gpu_parts.clear()
        self.sync_parts.clear()
        gpu_table = GpuTable(*gpu)
        if self.sizes_by_corr and len(gpu_table):
            # ROCm writes the size of a copy on the runtime call only: join it by correlation id.
            missing = np.nonzero((gpu_table.nbytes < 0) & (gpu_table.kind == MEMCPY))[0]
            for i in missing:
                size = self.sizes_by_corr.get(int(gpu_table.corr[i]))
                if size is not None:
                    gpu_table.nbytes[i] = size
        names = [""] * len(self.name_ids)
        for n, i in self.name_ids.items():
            names[i] = n
        operands = self._operands_by_name(gpu_table)
        threads = [("", "")] * len(self.thread_ids)
        for k, i in self.thread_ids.items():
            threads[i] = k
        span = (min(self.profiler_span), max(self.profiler_span)) if self.profiler_span else None
        return TraceData(
            path=path,
            stats=stats,
            names=names,
            threads=threads,
            thread_names=self.thread_names,
            host=HostTable(*host),
            gpu=gpu_table,
            profiler_span=span,
            memory_peak_bytes=self.memory_peak,
            skipped_no_time=self.skipped_no_time,
            other_phases=self.other_phases,
            operands_by_name=operands,
            gpu_sync=sync,
        )

    def _operands_by_name(self, gpu: GpuTable) -> dict[int, str]:
        """GPU activity name id -> the precision of the operands of every op that launched it, for
        the names whose launching ops (joined by External id) all agree."""
        ext = np.concatenate(self.gpu_ext_parts) if self.gpu_ext_parts else np.zeros(0, np.int64)
        self.gpu_ext_parts.clear()
        if not self.operands_by_ext or len(ext) != len(gpu):
            return {}
        codes = {"low": 1, "fp32": 2}
        op_ext = np.fromiter(self.operands_by_ext.keys(), dtype=np.int64, count=len(self.operands_by_ext))
        op_code = np.fromiter((codes[v] for v in self.operands_by_ext.values()), dtype=np.int8, count=len(op_ext))
        order = np.argsort(op_ext)
        op_ext, op_code = op_ext[order], op_code[order]
        pos = np.minimum(np.searchsorted(op_ext, ext), len(op_ext) - 1)
        found = (ext >= 0) & (op_ext[pos] == ext)
        pairs = np.unique(np.stack([gpu.name[found].astype(np.int64), op_code[pos[found]].astype(np.int64)]), axis=1)
        names, counts = np.unique(pairs[0], return_counts=True)
        agreed = set(names[counts == 1].tolist())
        label = {1: "low", 2: "fp32"}
        return {int(n): label[int(c)] for n, c in zip(pairs[0], pairs[1]) if int(n) in agreed}


def _intern(ids: dict[Any, int], keys: list[Any], cap: int, overflow: Any) -> list[int]:
    """Ids of ``keys`` in ``ids``, adding new keys (past ``cap`` new keys share the ``overflow`` id)."""
    get = ids.get
    out = [get(k, -1) for k in keys]
    if -1 in out:
        for i, v in enumerate(out):
            if v == -1:
                key = keys[i]
                if key not in ids and len(ids) >= cap:
                    key = overflow
                out[i] = ids.setdefault(key, len(ids))
    return out


_NO_ARGS = EventArgs()


def _stream_of(value: Any, tid: Any) -> int:
    """A stream id written as a string ("0x0" on ROCm), else the event's tid, else -1."""
    parsed = _as_int(value)
    if parsed is not None:
        return parsed
    return tid if type(tid) is int else -1


def _as_int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            return None
    return None


def _concat(parts: list[tuple[np.ndarray, ...]], dtypes: tuple[Any, ...]) -> list[np.ndarray]:
    if not parts:
        return [np.zeros(0, dtype=d) for d in dtypes]
    return [np.concatenate([p[i] for p in parts]) for i in range(len(dtypes))]


def load_trace(path: str | Path) -> TraceData:
    """Read one trace file into columnar tables (raises FormatError for a bad or empty trace)."""
    reader = TraceReader(path)
    builder = _Builder()
    chunks = reader.chunks()
    # Not a for loop: its variable would keep the previous chunk, whose events point into the
    # reader's buffer, alive while the reader refills that buffer.
    while (chunk := next(chunks, None)) is not None:
        builder.add(chunk)
        chunk = None
    data = builder.finish(str(path), reader.stats)
    if len(data.host) == 0 and len(data.gpu) == 0:
        raise FormatError(
            f"{path}: the trace has no timed events ({reader.stats.events} events read); "
            "record at least one step inside the profiler"
        )
    if reader.stats.skipped_events:
        log.warning("%s: skipped %d malformed events", path, reader.stats.skipped_events)
    return data
