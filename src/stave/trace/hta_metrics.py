"""Numbers with Holistic Trace Analysis' definitions, so a user can hold stave's JSON against HTA.

HTA (facebookresearch/HolisticTraceAnalysis, PyPI ``traceinsight``) is what users compare with.
Each number below follows the definition in HTA's analyzers (``breakdown_analysis``,
``communication_analysis``, ``cuda_kernel_analysis``), computed here in exact integer nanoseconds
and reported in microseconds (HTA's unit). The differences that remain are HTA's, not definitions:
HTA parses times as float64 (and by default rounds them to whole microseconds; compare with
``HTA_DISABLE_NS_ROUNDING=1``).

**HTA's rows.** HTA's *GPU rows* are kernels, memcpy, memset and ``cuda_sync`` records on a stream,
and host ops that carry a ``stream`` argument but no correlation id (Inductor's Triton launches:
HTA counts their host time as GPU time; such a row is in scope by its own start).
A GPU row is kept only when it has a correlation id and a host row with the same id (its launch)
lies in the *scope*:

* ``default`` (HTA's default): host rows that start before the last ``ProfilerStep#N`` starts, so the
  GPU work launched in the last profiled step is dropped;
* ``last_step_kept`` (HTA's ``include_last_profiler_step=True``): host rows that start no later
  than the last step's end.

With fewer than two distinct ``ProfilerStep#N`` names HTA filters nothing: every GPU row counts,
in both scopes.

**Per scope:** the temporal breakdown (span from the first GPU row's start to the last one's end;
idle = span minus the union of GPU rows; compute = union of compute-kernel rows; non-compute =
the rest), kernel-type time (the union of computation rows and of communication rows, split into
each alone and both at once), the comm/comp overlap (time both run over the communication union),
the idle time of each stream split by HTA's gap rule (``idle_breakdown``), and the launch
statistics (``launch``).

**Whole file** (``facts``, every GPU activity, no scope): kernel union and sum, memcpy per
direction and host memory kind, sync calls by name, kernels launched per CPU step, and the CPU
``ProfilerStep`` windows (annotation start and end) beside stave's GPU-aware step windows.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import numpy as np

from stave.trace import intervals as iv
from stave.trace.steps import StepWindows
from stave.trace.syncs import SYNC_CALLS
from stave.trace.tables import HOST_STREAM_KIND, KERNEL, MEMCPY, MEMSET, TraceData

# HTA's kernel classes (hta/common/types.py), by name pattern; a row can only be one.
_COMM = re.compile(r"(^nccl.*)|(^hip)|(^hccl)|(.*ncclKernel.*)")
_MEMORY = re.compile(r"(^(hip)?Memcpy)|(^(hip)?Memset)|(^dma)")
_NOT_COMPUTE = re.compile(
    r"(^nccl)|(.*Memcpy)|(.*Memset)|(.*dma)|(^.*Sync)|(^Stream Wait Event)|(cuda.*LaunchKernel)|(^runFunction)"
    r"|(^hip)|(^job_exe)|(^packet)|(^pe_exe)|(^cpum_exe_subgraph)|(^hccl)|(^collective_subgraph_execution)"
)
_STEP = re.compile(r"^ProfilerStep#(\d+)")
# HTA's default gap threshold for "kernel wait" (get_idle_time_breakdown's consecutive_kernel_delay:
# 30, in the trace's unit, microseconds).
KERNEL_WAIT_GAP_NS = 30_000
# HTA's default launch-delay outlier cutoff (get_cuda_kernel_launch_stats: 100 µs) and runtime cutoff (50 µs).
LAUNCH_DELAY_CUTOFF_NS = 100_000
RUNTIME_CUTOFF_NS = 50_000
# Runtime calls whose GPU work HTA's launch statistics pair (include_memory_events=True).
_LAUNCH_CALLS = frozenset({"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync",
                           "runFunction - job_prep_and_submit_for_execution"})
_MEMCPY_NAME = re.compile(r"^Memcpy (\w+)(?: \((\w+) -> (\w+)\))?")


@functools.lru_cache(maxsize=65536)
def kernel_type(name: str) -> str:
    """HTA's class of a GPU row by name: COMMUNICATION, MEMORY, COMPUTATION or OTHER."""
    if _COMM.match(name):
        return "COMMUNICATION"
    if _MEMORY.match(name):
        return "MEMORY"
    if not _NOT_COMPUTE.match(name):
        return "COMPUTATION"
    return "OTHER"


def _us(ns: int | float) -> float:
    return float(ns) / 1000.0


def _union_ns(start: np.ndarray, end: np.ndarray) -> int:
    lo, hi = iv.merge(start, end)
    return int((hi - lo).sum())


def _types(data: TraceData, names: np.ndarray) -> np.ndarray:
    """HTA's kernel type of each row, classified once per distinct name."""
    unique, inverse = np.unique(names, return_inverse=True)
    kinds = np.array([kernel_type(data.names[n]) for n in unique.tolist()], dtype=object)
    return kinds[inverse] if len(unique) else np.zeros(0, dtype=object)


def hta_section(data: TraceData, windows: StepWindows) -> dict[str, Any]:
    """The ``hta`` entry of one rank (module docstring): both scopes, then whole-file facts."""
    rows = _gpu_rows(data)
    launches = _launch_starts(data)
    return {
        "scopes": {scope: _scope(data, rows, scope, launches) for scope in ("default", "last_step_kept")},
        "facts": _facts(data, windows, launches),
    }


def _gpu_rows(data: TraceData) -> dict[str, np.ndarray]:
    """HTA's GPU rows: activities and cuda_sync records on a stream."""
    parts = [data.gpu] + ([data.gpu_sync] if data.gpu_sync is not None and len(data.gpu_sync) else [])
    masks = [t.stream != -1 for t in parts]
    return {k: np.concatenate([getattr(t, k)[m] for t, m in zip(parts, masks)])
            for k in ("start", "end", "stream", "name", "corr", "kind")}


def _step_rows(data: TraceData) -> tuple[np.ndarray, int]:
    """Mask of the host ``ProfilerStep#N`` rows, and how many distinct step names there are."""
    step_ids = [i for i, n in enumerate(data.names) if _STEP.match(n)]
    mask = np.isin(data.host.name, step_ids) if step_ids else np.zeros(len(data.host), dtype=bool)
    return mask, len(np.unique(data.host.name[mask]))


def select(data: TraceData, scope: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """HTA's GPU rows in ``scope`` (``default`` or ``last_step_kept``), and the mask of in-scope host rows."""
    return _select(data, _gpu_rows(data), scope)


def _select(data: TraceData, rows: dict[str, np.ndarray], scope: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    host = data.host
    steps, distinct = _step_rows(data)
    launch = host.corr >= 0
    if distinct < 2:
        # HTA filters nothing without two ProfilerStep names: every GPU row counts, in both scopes.
        in_scope = launch
        sel = dict(rows)
    else:
        last_start, last_end = int(host.start[steps].max()), int(host.end[steps].max())
        in_scope = launch & ((host.start < last_start) if scope == "default" else (host.start <= last_end))
        corr_in, mult = np.unique(host.corr[in_scope], return_counts=True)
        pos = np.minimum(np.searchsorted(corr_in, rows["corr"]), max(len(corr_in) - 1, 0))
        keep = rows["corr"] >= 0
        keep &= (corr_in[pos] == rows["corr"]) if len(corr_in) else False
        # HTA joins GPU rows to host rows on the correlation id: a GPU row matched by two host rows
        # (a runtime and a driver launch) appears twice, which only the per-stream gaps can see.
        repeat = np.where(keep, mult[pos] if len(corr_in) else 0, 0)
        # Host ops naming a stream are host rows to HTA's filter (kept by their start) and GPU rows
        # to its breakdowns.
        host_op = rows["kind"] == HOST_STREAM_KIND
        host_in = (rows["start"] < last_start) if scope == "default" else (rows["start"] <= last_end)
        repeat = np.where(host_op, host_in.astype(repeat.dtype), repeat)
        sel = {k: np.repeat(v, repeat) for k, v in rows.items()}
    return sel, in_scope


def _scope(data: TraceData, rows: dict[str, np.ndarray], scope: str,
           launches: tuple[np.ndarray, np.ndarray, np.ndarray]) -> dict[str, Any]:
    sel, in_scope = _select(data, rows, scope)
    out: dict[str, Any] = {"gpu_rows": int(len(sel["start"]))}
    if not len(sel["start"]):
        out.update(temporal=None, kernel_types_us={}, comm_comp_overlap=None, idle_breakdown=[], launch=None)
        return out
    types = _types(data, sel["name"])
    start, end = sel["start"], sel["end"]
    span = int(end.max() - start.min())
    busy = _union_ns(start, end)
    comp = types == "COMPUTATION"
    comm = types == "COMMUNICATION"
    compute = _union_ns(start[comp], end[comp])
    out["temporal"] = {
        "span_us": _us(span),
        "idle_us": _us(span - busy),
        "compute_us": _us(compute),
        "non_compute_us": _us(busy - compute),
    }
    comp_iv = iv.merge(start[comp], end[comp])
    comm_iv = iv.merge(start[comm], end[comm])
    both = iv.total(iv.intersect(comm_iv, comp_iv))
    comm_total = iv.total(comm_iv)
    out["kernel_types_us"] = {
        k: _us(v)
        for k, v in (
            ("COMPUTATION", compute - both),
            ("COMMUNICATION", comm_total - both),
            ("COMPUTATION overlapping COMMUNICATION", both),
        )
        if v > 0
    }
    out["comm_comp_overlap"] = both / comm_total if comm_total else None
    out["idle_breakdown"] = idle_breakdown(data, sel, launches=launches)
    out["launch"] = _launch_stats(data, sel, in_scope)
    return out


def _launch_starts(data: TraceData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Host rows with a correlation id, sorted by it: (corr, start, end)."""
    host = data.host
    m = host.corr >= 0
    order = np.argsort(host.corr[m], kind="stable")
    return host.corr[m][order], host.start[m][order], host.end[m][order]


def idle_breakdown(data: TraceData, sel: dict[str, np.ndarray], float64: bool = False,
                   launches: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> list[dict[str, Any]]:
    """HTA's idle time per stream: gaps between consecutive rows (by start) of GPU activities.

    A gap is *host wait* when the row's launch started after the previous row ended (the host was
    late), *kernel wait* when it is shorter than :data:`KERNEL_WAIT_GAP_NS` otherwise, else *other*.
    Gaps are start minus the previous row's end, so overlapping rows give negative gaps (HTA sums them).
    ``float64=True`` redoes it the way HTA computes, in float64 microseconds parsed from the text
    (for the cross-check: it shows which differences come from HTA's parsing alone).
    """
    act = np.isin(sel["kind"], (KERNEL, MEMCPY, MEMSET))
    corr, cstart, _cend = launches if launches is not None else _launch_starts(data)
    out = []
    for stream in np.unique(sel["stream"][act]).tolist():
        m = act & (sel["stream"] == stream)
        order = np.argsort(sel["start"][m], kind="stable")
        start, end, c = sel["start"][m][order], sel["end"][m][order], sel["corr"][m][order]
        pos = np.minimum(np.searchsorted(corr, c), max(len(corr) - 1, 0))
        found = (corr[pos] == c) if len(corr) else np.zeros(len(c), dtype=bool)
        launch = np.where(found, cstart[pos] if len(corr) else 0, np.iinfo(np.int64).min)
        if float64:
            s_us, e_us, l_us = _as_hta_floats(start, end, launch)
            gap, host_wait = s_us[1:] - e_us[:-1], l_us[1:] > e_us[:-1]
            kernel_wait = ~host_wait & (gap < KERNEL_WAIT_GAP_NS / 1000)
            scale = 1.0
        else:
            gap, host_wait = start[1:] - end[:-1], launch[1:] > end[:-1]
            kernel_wait = ~host_wait & (gap < KERNEL_WAIT_GAP_NS)
            scale = 1e-3
        other = ~host_wait & ~kernel_wait
        out.append({
            "stream": int(stream),
            "host_wait_us": float(gap[host_wait].sum()) * scale,
            "kernel_wait_us": float(gap[kernel_wait].sum()) * scale,
            "other_us": float(gap[other].sum()) * scale,
            "gaps": {"host_wait": int(host_wait.sum()), "kernel_wait": int(kernel_wait.sum()),
                     "other": int(other.sum())},
        })
    return out


def _as_hta_floats(start: np.ndarray, end: np.ndarray, launch: np.ndarray) -> tuple[np.ndarray, ...]:
    """Times as HTA holds them: the float64 nearest each microsecond text, shifted so the first is 0
    (HTA aligns ranks; the shift is exact), end = start + duration added in float."""
    def us(ns: np.ndarray) -> np.ndarray:
        return np.array([n / 1000 for n in ns.tolist()], dtype=np.float64)  # int/int rounds once, exactly

    origin = us(start[:1])[0] if len(start) else 0.0
    s_us = us(start) - origin
    e_us = s_us + us(end - start)
    no_launch = launch == np.iinfo(np.int64).min
    l_us = np.where(no_launch, -np.inf, us(np.where(no_launch, 0, launch)) - origin)
    return s_us, e_us, l_us


def _launch_stats(data: TraceData, sel: dict[str, np.ndarray], in_scope: np.ndarray) -> dict[str, Any]:
    """HTA's kernel launch statistics: launch call and GPU row joined by correlation id.

    Launch calls are cudaLaunchKernel(ExC), cudaMemcpyAsync, cudaMemsetAsync; launch delay is the
    GPU row's start minus the call's end, clipped at 0.
    """
    host = data.host
    ids = [i for i, n in enumerate(data.names) if n in _LAUNCH_CALLS]
    m = np.isin(host.name, ids) & in_scope & (host.corr >= 0)
    hc, hs, he = host.corr[m], host.start[m], host.end[m]
    order = np.argsort(hc, kind="stable")
    hc, hs, he = hc[order], hs[order], he[order]
    gc, gs, ge = sel["corr"], sel["start"], sel["end"]
    pos = np.minimum(np.searchsorted(hc, gc), max(len(hc) - 1, 0))
    hit = (len(hc) > 0) & (hc[pos] == gc) if len(hc) else np.zeros(len(gc), dtype=bool)
    cpu_dur = (he - hs)[pos[hit]]
    gpu_dur = (ge - gs)[hit]
    delay = np.maximum(gs[hit] - he[pos[hit]], 0)
    return {
        "count": int(hit.sum()),
        "launch_delay_over_100us": int((delay > LAUNCH_DELAY_CUTOFF_NS).sum()),
        "launch_delay_sum_us": _us(int(delay.sum())),
        "runtime_over_50us": int((cpu_dur > RUNTIME_CUTOFF_NS).sum()),
        "gpu_shorter_than_cpu": int((gpu_dur < cpu_dur).sum()),
    }


def _facts(data: TraceData, windows: StepWindows, launches: tuple[np.ndarray, np.ndarray, np.ndarray]) -> dict[str, Any]:
    """Whole-file facts (module docstring): every GPU activity, every step."""
    g, host = data.gpu, data.host
    k = g.kind == KERNEL
    facts: dict[str, Any] = {
        "kernels": {"count": int(k.sum()), "union_us": _us(_union_ns(g.start[k], g.end[k])),
                    "sum_us": _us(int((g.end[k] - g.start[k]).sum()))},
        "memcpy": _memcpy(data),
        "sync_calls": _sync_calls(data),
    }
    step_ids = {i: int(m.group(1)) for i, n in enumerate(data.names) if (m := _STEP.match(n))}
    is_step = np.isin(host.name, list(step_ids)) if step_ids else np.zeros(len(host), dtype=bool)
    rows = np.flatnonzero(is_step)
    rows = rows[np.argsort(host.start[rows], kind="stable")]
    corr, cstart, _ = launches
    pos = np.minimum(np.searchsorted(corr, g.corr), max(len(corr) - 1, 0))
    launched = (g.corr >= 0) & (len(corr) > 0)
    if len(corr):
        launched &= corr[pos] == g.corr
    launch_ts = np.where(launched, cstart[pos] if len(corr) else 0, 0)
    kernel_launches = np.sort(launch_ts[launched & k])
    cpu_steps = []
    for r in rows.tolist():
        lo, hi = int(host.start[r]), int(host.end[r])
        n = int(np.searchsorted(kernel_launches, hi, side="left") - np.searchsorted(kernel_launches, lo, side="left"))
        cpu_steps.append({"number": step_ids[int(host.name[r])], "start_ns": lo, "end_ns": hi, "kernels_launched": n})
    facts["cpu_profiler_steps"] = cpu_steps
    facts["outside_steps"] = _outside_steps(data, windows, rows, launched, launch_ts) if len(rows) else None
    facts["gpu_aware_steps"] = [
        {"number": int(windows.numbers[i]), "start_ns": int(windows.start[i]), "end_ns": int(windows.end[i])}
        for i in range(len(windows))
    ] if windows.marked else []
    return facts


def _outside_steps(data: TraceData, windows: StepWindows, step_rows: np.ndarray, launched: np.ndarray,
                   launch_ts: np.ndarray) -> dict[str, Any]:
    """GPU work not launched from inside a profiled step: before the first (an unprofiled iteration
    still draining), after the last (end-of-loop calls), or with no launch call in the trace. Each:
    count, GPU time, and the part of it inside stave's GPU-aware step windows."""
    g, host = data.gpu, data.host
    first, last = int(host.start[step_rows].min()), int(host.end[step_rows].max())
    groups = {
        "launched_before_first_step": launched & (launch_ts < first),
        "launched_after_last_step": launched & (launch_ts >= last),
        "no_launch_call": ~launched,
    }
    out: dict[str, Any] = {}
    for key, m in groups.items():
        spans = iv.merge(g.start[m], g.end[m])
        inside = int(iv.measure_in(spans, windows.start, windows.end).sum()) if len(windows) else 0
        out[key] = {"count": int(m.sum()), "time_us": _us(int((g.end[m] - g.start[m]).sum())),
                    "inside_step_windows_us": _us(inside)}
    return out


def _memcpy(data: TraceData) -> list[dict[str, Any]]:
    """Copies per direction and host memory kind (from CUPTI's name, e.g. ``Memcpy DtoH (Device -> Pageable)``)."""
    g = data.gpu
    m = np.flatnonzero(g.kind == MEMCPY)
    groups: dict[tuple[str, str | None], list[int]] = {}
    for name_id in np.unique(g.name[m]).tolist():
        match = _MEMCPY_NAME.match(data.names[name_id])
        direction = match.group(1) if match else "unknown"
        src, dst = (match.group(2), match.group(3)) if match and match.group(2) else (None, None)
        kind = next((x for x in (src, dst) if x and x != "Device"), None) if src else None
        if kind is None and src == "Device" and dst == "Device":
            kind = "Device"
        groups.setdefault((direction, kind), []).append(name_id)
    out = []
    for (direction, kind), ids in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        rows = m[np.isin(g.name[m], ids)]
        nbytes = g.nbytes[rows]
        out.append({
            "direction": direction,
            "host_memory": kind,
            "count": int(len(rows)),
            "bytes": int(nbytes[nbytes >= 0].sum()),
            "bytes_unknown": int((nbytes < 0).sum()),
            "time_us": _us(int((g.end[rows] - g.start[rows]).sum())),
        })
    return out


def _sync_calls(data: TraceData) -> dict[str, dict[str, Any]]:
    """Host calls that wait for the device, by name: count and total host time."""
    host = data.host
    ids = [i for i, n in enumerate(data.names) if n in SYNC_CALLS]
    out: dict[str, dict[str, Any]] = {}
    for i in ids:
        m = host.name == i
        if m.any():
            out[data.names[i]] = {"count": int(m.sum()), "time_us": _us(int((host.end[m] - host.start[m]).sum()))}
    return out
