"""Cross-check the ``hta`` section of ``stave.trace/1`` against Holistic Trace Analysis itself.

``python -m benchmarks.trace_hta_check [TRACE|DIR ...]`` (HTA: PyPI ``traceinsight``, a bench-only
dependency; default inputs: the shared GPU fixtures) runs HTA on each trace in both of its scopes
(``include_last_profiler_step`` False and True) with ``HTA_DISABLE_NS_ROUNDING=1`` (HTA otherwise
rounds every time to whole microseconds) and compares every quantity of stave's ``hta`` section
(:mod:`stave.trace.hta_metrics`): the temporal breakdown, kernel-type time, comm/comp overlap,
idle time per stream and cause, and the launch statistics.

A row agrees when the two numbers are within 1 % or 1 µs. A row that differs passes only inside a
listed category (:data:`CATEGORIES`), named on the row; any other difference fails the check.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.console import result_line

log = logging.getLogger(__name__)

REL_TOL = 0.01
ABS_TOL_US = 1.0
# HTA reports the comm/comp overlap only as a percentage rounded to two decimals.
PCT_TOL = 0.005
# Why a number may differ from HTA's and still be right (stave is exact there, not a copy of HTA).
CATEGORIES = {
    "hta-us-rounding": "HTA truncates this sum to whole microseconds (astype(int) in its kernel-type breakdown)",
    "float64": "HTA parses times as float64: 16+ digit timestamps land on a 0.25 µs grid",
    "bogus-launch": "HTA gives a GPU row whose launch it cannot find the time of an unrelated row",
}


@dataclass
class Row:
    """One quantity from both tools."""

    trace: str
    scope: str
    metric: str
    stave: float | None
    hta: float | None
    category: str | None = None

    @property
    def agrees(self) -> bool:
        """Within REL_TOL or the metric's absolute tolerance (both missing counts as agreeing)."""
        if self.stave is None or self.hta is None:
            return self.stave is None and self.hta is None
        diff = abs(self.stave - self.hta)
        return diff <= _abs_tol(self.metric) or diff <= REL_TOL * abs(self.hta)

    @property
    def passes(self) -> bool:
        """Agrees, or differs inside a listed category."""
        return self.agrees or self.category in CATEGORIES


def _abs_tol(metric: str) -> float:
    """1 µs for times; HTA's own rounding for the overlap (a percentage with 2 decimals); 0 for counts."""
    if metric.endswith("_us"):
        return ABS_TOL_US
    if metric == "comm_comp_overlap_pct":
        return PCT_TOL
    return 0.0


def _num(value: Any) -> float | None:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def _hta_numbers(path: Path, workdir: Path, keep_last: bool) -> dict[str, float | None] | None:
    """HTA's numbers for one trace and scope, keyed like :func:`_stave_numbers`; None if HTA cannot analyse it."""
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.trace_analysis import TraceAnalysis
    from hta.utils.utils import KernelType, get_kernel_type

    d = workdir / f"{path.name.replace('.', '_')}_{int(keep_last)}"
    d.mkdir()
    shutil.copy(path, d / path.name)
    try:
        ta = TraceAnalysis(trace_dir=str(d), include_last_profiler_step=keep_last)
        rank = ta.t.get_ranks()[0]
        tb = ta.get_temporal_breakdown(visualize=False).iloc[0]
    except (ValueError, KeyError, IndexError, AttributeError, AssertionError, TypeError) as exc:
        log.info("HTA cannot analyse %s: %s", path, exc)
        return None
    out: dict[str, float | None] = {
        "temporal.span_us": _num(tb["kernel_time(us)"]),
        "temporal.idle_us": _num(tb["idle_time(us)"]),
        "temporal.compute_us": _num(tb["compute_time(us)"]),
        "temporal.non_compute_us": _num(tb["non_compute_time(us)"]),
    }
    trace_df = ta.t.get_trace(rank)
    sym = ta.t.symbol_table.get_sym_table()
    gpu = trace_df[trace_df["stream"].ne(-1)].copy()
    gpu["kernel_type"] = gpu["name"].map(lambda i: get_kernel_type(sym[i]))
    kt = BreakdownAnalysis._get_gpu_kernel_type_time(
        gpu, [KernelType.COMPUTATION.name, KernelType.COMMUNICATION.name])
    for label, total in zip(kt["kernel_type"], kt["sum"]):
        out[f"kernel_types_us.{label}"] = _num(total)
    try:
        ov = ta.get_comm_comp_overlap(visualize=False)
        out["comm_comp_overlap_pct"] = _num(ov["comp_comm_overlap_pctg"].iloc[0])
    except (ValueError, KeyError, IndexError, ZeroDivisionError):
        out["comm_comp_overlap_pct"] = None
    idle, _ = ta.get_idle_time_breakdown(ranks=[rank], visualize=False) if _takes_ranks(ta) else \
        ta.get_idle_time_breakdown(rank=rank, visualize=False)
    for stream, cat, t in zip(idle["stream"], idle["idle_category"], idle["idle_time"]):
        out[f"idle.{int(stream)}.{cat}_us"] = _num(t)
    stats = ta.get_cuda_kernel_launch_stats(ranks=[rank], visualize=False)[rank]
    out["launch.count"] = float(len(stats))
    out["launch.launch_delay_over_100us"] = float((stats["launch_delay"] > 100).sum())
    out["launch.launch_delay_sum_us"] = _num(stats["launch_delay"].sum())
    out["launch.runtime_over_50us"] = float((stats["cpu_duration"] > 50).sum())
    out["launch.gpu_shorter_than_cpu"] = float((stats["gpu_duration"] < stats["cpu_duration"]).sum())
    return out


def _takes_ranks(ta: Any) -> bool:
    import inspect

    return "ranks" in inspect.signature(ta.get_idle_time_breakdown).parameters


def _stave_numbers(scope: dict[str, Any]) -> dict[str, float | None]:
    """The same keys from one scope of stave's ``hta`` section."""
    out: dict[str, float | None] = {}
    for k, v in (scope.get("temporal") or {}).items():
        out[f"temporal.{k}"] = v
    for k, v in scope.get("kernel_types_us", {}).items():
        out[f"kernel_types_us.{k}"] = v
    overlap = scope.get("comm_comp_overlap")
    out["comm_comp_overlap_pct"] = None if overlap is None else 100 * overlap
    for s in scope.get("idle_breakdown", []):
        for cat in ("host_wait", "kernel_wait", "other"):
            out[f"idle.{s['stream']}.{cat}_us"] = s[f"{cat}_us"]
    for k, v in (scope.get("launch") or {}).items():
        out[f"launch.{k}"] = float(v)
    return out


def compare(path: Path, workdir: Path) -> list[Row] | None:
    """Every quantity of both scopes for one trace; None when HTA cannot analyse the trace."""
    from stave.trace.analysis import analyze_trace

    mine = analyze_trace(path).hta
    if mine is None:
        return None
    rows: list[Row] = []
    for scope, keep_last in (("default", False), ("last_step_kept", True)):
        theirs = _hta_numbers(path, workdir, keep_last)
        if theirs is None:
            return None
        ours = _stave_numbers(mine["scopes"][scope])
        for metric in sorted(set(ours) | set(theirs)):
            s, h = ours.get(metric), theirs.get(metric)
            if metric.startswith("idle."):
                # HTA lists a cause only where a stream has a gap of it (its first row counts, with
                # no gap, as "other"): a missing cause is zero time on either side.
                s, h = s or 0.0, h or 0.0
            row = Row(path.name, scope, metric, s, h)
            if not row.agrees:
                row.category = _explain(metric, s, h, mine["scopes"][scope]["gpu_rows"])
                if row.category is None and metric.startswith("idle.") and h is not None:
                    row.category = _float64_explains(path, scope, metric, h)
            rows.append(row)
    return rows


def _explain(metric: str, stave: float | None, hta: float | None, rows: int) -> str | None:
    """Name the listed category of a differing row, where the metric and the numbers fit it."""
    if stave is None or hta is None:
        return None
    if metric.startswith("kernel_types_us.") and hta == int(hta) and 0 <= stave - hta < rows:
        # HTA's astype(int) per merged interval: it loses under 1 µs per interval, never gains.
        return "hta-us-rounding"
    return None


def _float64_explains(path: Path, scope: str, metric: str, hta: float) -> str | None:
    """"float64" when stave's own idle split, redone on HTA's float64 times, gives HTA's number."""
    from stave.trace.hta_metrics import idle_breakdown, select
    from stave.trace.tables import load_trace

    data = load_trace(path)
    sel, _ = select(data, scope)
    _, stream, cause = metric.split(".")
    for s in idle_breakdown(data, sel, float64=True):
        if str(s["stream"]) == stream:
            redone = Row(path.name, scope, metric, s[cause], hta)
            return "float64" if redone.agrees else None
    return None


def _inputs(args: list[str]) -> list[Path]:
    if not args:
        fixtures = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "traces"
        args = [str(fixtures)]
    paths: list[Path] = []
    for a in args:
        p = Path(a)
        if p.is_dir():
            paths += sorted(x for x in p.rglob("*.json*") if x.is_file() and x.stat().st_size > 0)
        elif p.exists():
            paths.append(p)
        else:
            result_line(f"skipped (absent): {p}")
    return paths


def main(argv: list[str] | None = None) -> int:
    """Compare every trace given (files or folders); exit 1 when a row fails."""
    logging.disable(logging.WARNING)  # HTA logs warnings per trace
    paths = _inputs(argv if argv is not None else sys.argv[1:])
    failed = 0
    total = 0
    summary: list[str] = []
    from stave.errors import StaveError

    with tempfile.TemporaryDirectory() as tmp:
        for i, p in enumerate(paths):
            work = Path(tmp) / str(i)
            work.mkdir()
            try:
                rows = compare(p, work)
            except StaveError as exc:
                result_line(f"{p.name}: stave cannot read it ({exc})")
                continue
            total += 1
            if rows is None:
                result_line(f"{p.name}: not analysable by HTA (or no GPU work): skipped")
                continue
            cats = sorted({r.category for r in rows if not r.agrees and r.passes})
            largest = max((abs(r.stave - r.hta) for r in rows if r.agrees and r.stave is not None
                           and r.hta is not None), default=0.0)
            summary.append(f"| {p.parent.name}/{p.name} | {len(rows)} | {sum(r.agrees for r in rows)} | "
                           + (", ".join(f"{c}: {sum(r.category == c and not r.agrees for r in rows)}" for c in cats)
                              or "-")
                           + f" | {sum(not r.passes for r in rows)} | {largest:.3f} |")
            for r in rows:
                mark = "ok" if r.agrees else (f"ok ({r.category})" if r.passes else "DIFF")
                failed += not r.passes
                s = "-" if r.stave is None else f"{r.stave:.3f}"
                h = "-" if r.hta is None else f"{r.hta:.3f}"
                result_line(f"| {p.name[:40]} | {r.scope} | {r.metric} | {s} | {h} | {mark} |")
    result_line("| trace | rows | agree (1 % or 1 µs) | differ, listed category | fail | largest agreeing diff |")
    result_line("|---|---|---|---|---|---|")
    for line in summary:
        result_line(line)
    result_line(f"rows failing: {failed}")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
