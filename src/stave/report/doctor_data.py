"""The doctor report's sections as plain, JSON-safe data.

One function per section (summary, steps, utilization, data pipeline, device copies, hot lines).
The JSON report is made of them, and the terminal and HTML renderers read the same dicts, so the
three outputs cannot disagree. Seconds appear here for the first time (records hold ``*_ns``).
Absent counters stay ``None``.
"""

from __future__ import annotations

import dataclasses
import linecache
import math
import typing
from typing import Any, Iterable, Sequence

from stave.analyze.breakdown import StepSummary
from stave.analyze.host import samples_in_counted_steps
from stave.analyze.hotlines import HotLine
from stave.analyze.pipeline import PipelineSummary
from stave.measure.host import HostSample
from stave.measure.record import RunRecord
from stave.measure.serialize import to_dict
from stave.measure.steps import PHASES

# A one-hour run sampled at 10 Hz has 36,000 host samples; no plot or reader resolves more than a
# few thousand points, and the JSON stays a few MB. Longer series are averaged in equal groups.
MAX_UTILIZATION_POINTS = 3600

# HostSample fields that are not readings of a counter.
_HOST_NON_COUNTERS = ("t_ns", "step")


def seconds_keys(obj: Any) -> Any:
    """Convert ``*_ns`` keys (recursively) to ``*_s`` in seconds; other keys pass through."""
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            if isinstance(key, str) and key.endswith("_ns"):
                out[key[:-3] + "_s"] = _ns_to_s(value)
            else:
                out[key] = seconds_keys(value)
        return out
    if isinstance(obj, list):
        return [seconds_keys(v) for v in obj]
    return obj


def _ns_to_s(value: Any) -> Any:
    if isinstance(value, list):
        return [_ns_to_s(v) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value / 1e9
    return value


def time_origin_ns(record: RunRecord) -> int:
    """The run's time zero: the earliest timestamp among steps, host samples, spans and stacks."""
    starts = []
    if record.steps:
        starts.append(min(s.start_ns for s in record.steps))
    if record.host:
        starts.append(min(h.t_ns for h in record.host))
    if record.spans:
        starts.append(min(sp.start_ns for sp in record.spans))
    if record.stacks.samples:
        starts.append(min(int(row[0]) for row in record.stacks.samples))
    return min(starts) if starts else 0


def counted_indices(record: RunRecord) -> set[int]:
    """Indices of the steps that enter the statistics."""
    return {s.index for s in record.counted_steps()}


# --- summary -------------------------------------------------------------------------------------


def summary_section(summary: StepSummary, record: RunRecord | None,
                    utilization: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``summary`` object (also the shape of each ``ranks`` entry).

    Step statistics are ``None`` when no step was counted (a median of nothing is not 0).
    ``utilization``: the record's :func:`utilization_summary` when the caller already has it.
    """
    counted = summary.steps > 0
    host = list(record.host) if record is not None else []
    rss = [h.rss_bytes for h in host if h.rss_bytes is not None]
    cuda = [h.cuda_peak_bytes for h in host if h.cuda_peak_bytes is not None]
    return {
        "steps": summary.steps,
        "total_steps": summary.total_steps,
        "step_time_s": {
            "median": summary.step_time_median_s if counted else None,
            "p90": summary.step_time_p90_s if counted else None,
            "mean": summary.step_time_mean_s if counted else None,
            "min": summary.step_time_min_s if counted else None,
            "max": summary.step_time_max_s if counted else None,
        },
        # Samples are counted from DataLoader batches; a loop that slices its own tensors has none,
        # and "0 samples/s" would read as a measurement.
        "samples_per_step": summary.samples_per_step if counted and summary.samples_per_step > 0 else None,
        "samples_per_s": summary.samples_per_s if counted and summary.samples_per_step > 0 else None,
        "breakdown": {p: (summary.breakdown.get(p, 0.0) if counted else None) for p in PHASES},
        "phase_s": {
            p: {
                "median": summary.phase_median_s.get(p, 0.0) if counted else None,
                "mean": summary.phase_mean_s.get(p, 0.0) if counted else None,
            }
            for p in PHASES
        },
        "h2d_bytes_per_step": summary.h2d_bytes_per_step if counted else None,
        "comm_wait_s": summary.comm_wait_mean_s if counted else None,
        "peak_rss_bytes": max(rss) if rss else None,
        "peak_cuda_bytes": max(cuda) if cuda else None,
        "utilization": utilization if utilization is not None or record is None else utilization_summary(record),
        **tokens_and_eval_section(summary, record),
    }


def tokens_and_eval_section(summary: StepSummary, record: RunRecord | None) -> dict[str, Any]:
    """Token throughput (padding included and left out), evaluation's share of the wall time, MFU.

    Tokens are ``None`` when the model was fed no token ids; MFU when FLOPs or a peak are unknown.
    """
    from stave.analyze.mfu import model_flops_utilization

    counted = summary.steps > 0
    tokens = counted and summary.tokens_per_step > 0
    util = model_flops_utilization(record, summary) if record is not None and counted else None
    return {
        "tokens_per_step": summary.tokens_per_step if tokens else None,
        "real_tokens_per_step": summary.real_tokens_per_step if tokens else None,
        "tokens_per_s": summary.tokens_per_s if tokens else None,
        "real_tokens_per_s": summary.real_tokens_per_s if tokens else None,
        "eval_share": summary.eval_share if counted else None,
        "eval_s": summary.eval_mean_s if counted else None,
        "mfu": None if util is None else {
            "value": util.mfu, "flops_per_step": util.flops_per_step,
            "peak_flops_per_s": util.peak_flops_per_s, "peak_source": util.peak_source,
        },
    }


# --- steps ---------------------------------------------------------------------------------------


def steps_section(record: RunRecord, origin_ns: int | None = None) -> list[dict[str, Any]]:
    """One object per optimizer step, every step (warm-up included, flagged), in seconds."""
    origin = time_origin_ns(record) if origin_ns is None else origin_ns
    rows = []
    for s in record.steps:
        rows.append(
            {
                "index": s.index,
                "start_s": (s.start_ns - origin) / 1e9,
                "time_s": s.duration_ns / 1e9,
                "phase_s": {p: s.phase_ns(p) / 1e9 for p in PHASES},
                "comm_wait_s": s.comm_wait_ns / 1e9,
                "samples": s.samples,
                "h2d_bytes": s.h2d_bytes,
                "data_fetches": s.data_fetches,
                "forward_calls": s.forward_calls,
                "backward_calls": s.backward_calls,
                "eval_s": s.eval_ns / 1e9,
                "tokens": s.tokens,
                "real_tokens": s.real_tokens,
                "counted": s.counted,
                "warmup": s.warmup,
                "profiled": s.profiled,
                "flop_counted": s.flop_counted,
                "device_timed": s.device_timed,
                "rss_bytes": s.rss_bytes or None,
                "cpu_s": s.cpu_ns / 1e9 if s.cpu_ns else None,
                "data_wait_cpu_s": s.data_wait_cpu_ns / 1e9 if s.cpu_ns else None,
            }
        )
    return rows


# --- utilization ---------------------------------------------------------------------------------


def host_counter_fields() -> list[str]:
    """The counters a :class:`HostSample` carries, in declaration order."""
    return [f.name for f in dataclasses.fields(HostSample) if f.name not in _HOST_NON_COUNTERS]


def _int_fields() -> set[str]:
    hints = typing.get_type_hints(HostSample)
    return {name for name, tp in hints.items() if int in typing.get_args(tp) or tp is int}


def _window_samples(record: RunRecord) -> tuple[list[HostSample], str]:
    # The same samples the rules read (analyze.host), so the report shows what the findings saw.
    samples = samples_in_counted_steps(record)
    if not samples:
        return list(record.host), "run"
    counted = counted_indices(record)
    return samples, "counted_steps" if all(h.step in counted for h in samples) else "steps"


def utilization_summary(record: RunRecord) -> dict[str, Any]:
    """Mean, min and max of every host counter over the counted steps (over all steps when no
    sample fell in a counted step, over the whole run when none fell in any step).

    A counter absent from every sample is ``None``, not a row of zeros.
    """
    samples, window = _window_samples(record)
    out: dict[str, Any] = {"samples": len(samples), "window": window}
    for name in host_counter_fields():
        values = [v for v in (getattr(h, name) for h in samples) if v is not None and math.isfinite(v)]
        out[name] = {"mean": sum(values) / len(values), "min": min(values), "max": max(values)} if values else None
    return out


def utilization_section(record: RunRecord, origin_ns: int | None = None,
                        max_points: int = MAX_UTILIZATION_POINTS) -> list[dict[str, Any]]:
    """The host samples over time (``t_s`` from the run's origin), at most ``max_points`` rows.

    With more samples, consecutive samples are averaged in equal-size groups; an absent reading
    does not enter a group's mean, and a group with no reading of a counter keeps ``None``.
    """
    origin = time_origin_ns(record) if origin_ns is None else origin_ns
    fields = host_counter_fields()
    ints = _int_fields()
    samples = sorted(record.host, key=lambda h: h.t_ns)
    group = max(1, math.ceil(len(samples) / max(1, max_points)))
    rows = []
    if group == 1:
        return [{"t_s": (h.t_ns - origin) / 1e9, "step": h.step, **{name: getattr(h, name) for name in fields}}
                for h in samples]
    for start in range(0, len(samples), group):
        chunk = samples[start:start + group]
        row: dict[str, Any] = {
            "t_s": (sum(h.t_ns for h in chunk) / len(chunk) - origin) / 1e9,
            "step": chunk[-1].step,
        }
        for name in fields:
            values = [getattr(h, name) for h in chunk if getattr(h, name) is not None]
            if not values:
                row[name] = None
                continue
            mean = sum(values) / len(values)
            row[name] = int(round(mean)) if name in ints else mean
        rows.append(row)
    return rows


# --- data pipeline -------------------------------------------------------------------------------


def _per(num: float | None, den: float) -> float | None:
    return None if num is None or not den else num / den


def data_pipeline_section(record: RunRecord, pipe: PipelineSummary | None) -> dict[str, Any]:
    """Loader stages (seconds per sample), per-worker accounts and their I/O counters.

    ``pipe`` is the main loader's summary the doctor computed (``DoctorResult.pipeline``).

    Stages are summed over the workers of a loader (``where`` = "workers"); the main process's
    own stages (worker_id -1, when ``num_workers=0``) are "main".
    """
    groups: dict[tuple[int, str], dict[str, list[int]]] = {}
    order: dict[tuple[int, str], list[str]] = {}

    def add(loader_id: int, where: str, stages: Iterable[Any]) -> None:
        key = (loader_id, where)
        acc = groups.setdefault(key, {})
        names = order.setdefault(key, [])
        for st in stages:
            if st.name not in acc:
                acc[st.name] = [0, 0, 0]
                names.append(st.name)
            acc[st.name][0] += st.samples
            acc[st.name][1] += st.wall_ns
            acc[st.name][2] += st.cpu_ns

    for w in record.workers:
        add(w.loader_id, "main" if w.worker_id < 0 else "workers", w.stages)

    stages = []
    for key, acc in groups.items():
        total_wall = sum(v[1] for v in acc.values())
        # Pipeline order: reading first, collate last, transforms in the order they were seen.
        for name in sorted(order[key], key=lambda n: {"load": 0, "collate": 2}.get(n, 1)):
            samples, wall_ns, cpu_ns = acc[name]
            stages.append(
                {
                    "loader_id": key[0],
                    "where": key[1],
                    "name": name,
                    "samples": samples,
                    "wall_per_sample_s": _per(wall_ns / 1e9, samples),
                    "cpu_per_sample_s": _per(cpu_ns / 1e9, samples),
                    "off_cpu_frac": max(0.0, 1.0 - cpu_ns / wall_ns) if wall_ns else None,
                    "share": wall_ns / total_wall if total_wall else None,
                }
            )

    workers = []
    for w in record.workers:
        workers.append(
            {
                "worker_id": w.worker_id,
                "pid": w.pid,
                "loader_id": w.loader_id,
                "samples": w.samples,
                "batches": w.batches,
                "getitem_per_sample_s": _per(w.getitem_wall_ns / 1e9, w.samples),
                "getitem_cpu_frac": (w.getitem_cpu_ns / w.getitem_wall_ns) if w.getitem_wall_ns else None,
                "opens_per_sample": _per(w.opens, w.samples),
                "reads_per_sample": _per(w.read_calls, w.samples),
                "bytes_per_read": _per(w.read_chars, w.read_calls or 0),
                "read_bytes_per_sample": _per(w.read_bytes, w.samples),
                "run_delay_per_sample_s": _per(None if w.run_delay_ns is None else w.run_delay_ns / 1e9, w.samples),
                "opens": w.opens,
                "read_calls": w.read_calls,
                "read_chars": w.read_chars,
                "read_bytes": w.read_bytes,
                "alive_s": w.alive_ns / 1e9,
            }
        )
    return {"stages": stages, "workers": workers, "io": _io_totals(pipe)}


def _io_totals(pipe: PipelineSummary | None) -> dict[str, Any] | None:
    """The main loader's cost and I/O per sample, as the input-pipeline rules see it
    (:func:`stave.analyze.pipeline.summarize_pipeline`); ``None`` when no worker reported."""
    if pipe is None:
        return None
    return {
        "loader_id": pipe.loader.loader_id,
        "samples": pipe.samples,
        "wall_per_sample_s": pipe.wall_s_per_sample,
        "cpu_per_sample_s": pipe.cpu_s_per_sample,
        "off_cpu_frac": pipe.off_cpu_share,
        "run_delay_per_sample_s": pipe.run_delay_s_per_sample,
        "opens_per_sample": pipe.opens_per_sample,
        "reads_per_sample": pipe.read_calls_per_sample,
        "bytes_per_read": pipe.bytes_per_read_call,
        "read_bytes_per_sample": pipe.read_bytes_per_sample,
    }


# --- host/device copies and syncs ---------------------------------------------------------------


def device_section(record: RunRecord) -> dict[str, Any]:
    """Host-device copies by kind, syncing call sites, and counted ``torch.cuda`` calls."""
    copies = [seconds_keys({**to_dict(c), "bytes": c.nbytes}) for c in record.copies]
    for c in copies:
        c.pop("nbytes", None)
    return {
        "copies": copies,
        "syncs": [to_dict(s) for s in record.syncs],
        "cuda_calls": dict(record.cuda_calls),
    }


# --- hot lines -----------------------------------------------------------------------------------


def hot_lines_section(record: RunRecord, lines: Sequence[HotLine], steps: set[int] | None) -> list[dict[str, Any]]:
    """The user's source lines that the main thread's stack samples fell on most, with their phase.

    ``lines`` and ``steps`` are what the doctor computed (``DoctorResult.hot_lines`` /
    ``stack_steps``, ranked by :func:`stave.analyze.hotlines.hot_lines`, as the rules cite them):
    time inside torch or another library is charged to the user's line that called it, and
    ``share`` is over all samples in the window. Each line adds the phases it ran in and its source text.
    """
    profile = record.stacks
    if not lines:
        return []
    phases = sorted({str(row[2]) for row in profile.samples if row[2] is not None})
    by_phase = {ph: profile.line_counts(steps=steps, phase=ph) for ph in phases}
    rows = []
    for hl in lines:
        phase_counts = {}
        for ph in phases:
            n = sum(c for frame, c in by_phase[ph].items() if (frame.file, frame.line) == (hl.file, hl.line))
            if n:
                phase_counts[ph] = n
        top_phase = max(phase_counts, key=lambda ph: (phase_counts[ph], ph)) if phase_counts else None
        rows.append(
            {
                "file": hl.file,
                "line": hl.line,
                "function": hl.function,
                "samples": hl.samples,
                "share": hl.share,
                "phase": top_phase,
                "phase_shares": {ph: c / hl.samples for ph, c in phase_counts.items()},
                "code": source_line(hl.file, hl.line),
            }
        )
    return rows


def source_line(path: str, line: int) -> str | None:
    """The text of a source line, stripped, or ``None`` when the file cannot be read here."""
    text = linecache.getline(path, line).strip() if line > 0 else ""
    return text or None


def dedupe(items: Sequence[str]) -> list[str]:
    """Items in first-seen order without repeats (notes come from the result and the record)."""
    out: list[str] = []
    for item in items:
        if item not in out:
            out.append(item)
    return out
