"""Cross-check stave's GPU numbers against Holistic Trace Analysis (PyPI ``traceinsight``, bench only).

Two comparisons per trace, printed as a table by ``python -m benchmarks.trace_hta_check TRACE...``:

1. Same events, two implementations (asserted within 1% by the slow test): HTA parses and filters
   the trace (its own selection: GPU activities launched before the last ProfilerStep, timestamps
   rounded to whole microseconds); on exactly those rows (kernels, memcpy, memset with a stream)
   stave's interval code computes the GPU span, idle and compute time, and stave's per-stream idle
   split computes host wait / short gaps / other, which are compared to HTA's own functions.
2. Whole trace, each tool's own definitions (reported, not asserted): HTA's
   ``get_temporal_breakdown`` against stave's analysis. They differ by design: HTA drops the last
   step, rounds timestamps, and counts every row with a ``stream`` argument as GPU work (also CPU
   ops that carry one, and ``cuda_sync`` rows); stave keeps every step and only GPU activities.
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stave.trace import intervals as iv
from stave.trace.gpu import idle_by_stream
from stave.trace.kernels import COMPUTE, classify_kernel
from benchmarks.console import result_line

log = logging.getLogger(__name__)

# HTA's default threshold for "kernel wait" gaps (microseconds in HTA's units), and stave's.
HTA_KERNEL_DELAY_US = 30
KERNEL_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


@dataclass
class Comparison:
    """One number from both tools."""

    trace: str
    metric: str
    stave: float
    hta: float

    @property
    def rel_diff(self) -> float:
        """|stave - hta| / max(|hta|, tiny)."""
        return abs(self.stave - self.hta) / max(abs(self.hta), 1e-12)


def _load_hta(path: Path, workdir: Path) -> Any:
    from hta.trace_analysis import TraceAnalysis

    d = workdir / path.name.replace(".", "_")
    d.mkdir()
    shutil.copy(path, d / path.name)
    return TraceAnalysis(trace_dir=str(d))


def same_events(path: Path, workdir: Path) -> list[Comparison]:
    """Comparison 1 (module docstring): stave's code on HTA's selected rows vs HTA's functions."""
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.utils.utils import KernelType, get_kernel_type, merge_kernel_intervals

    ta = _load_hta(path, workdir)
    rank = ta.t.get_ranks()[0]
    df = ta.t.get_trace(rank)
    sym = ta.t.symbol_table.get_sym_table()
    cats = df["cat"].map(lambda i: sym[i])
    names = df["name"].map(lambda i: sym[i])
    gpu = df[df["stream"].ne(-1) & cats.isin(KERNEL_CATS)].copy()
    gpu_names = names[gpu.index]
    name = f"{path.name}"
    out: list[Comparison] = []

    # HTA's implementation on these rows.
    hta_idle, hta_span = BreakdownAnalysis._get_idle_time_for_kernels(gpu.copy())
    is_comp = gpu_names.map(lambda n: get_kernel_type(n) == KernelType.COMPUTATION.name)
    comp = merge_kernel_intervals(gpu[is_comp.values].copy()) if is_comp.any() else None
    hta_compute = float(comp.end.sum() - comp.ts.sum()) if comp is not None else 0.0

    # stave's implementation on the same rows (HTA's whole microseconds -> ns).
    start = gpu["ts"].to_numpy(dtype=np.int64) * 1000
    end = start + gpu["dur"].to_numpy(dtype=np.int64) * 1000
    merged = iv.merge(start, end)
    span = int(end.max() - start.min())
    idle = span - iv.total(merged)
    cats_gpu = cats[gpu.index].to_numpy()
    compute_mask = np.array(
        [c == "kernel" and classify_kernel(n).group == COMPUTE for c, n in zip(cats_gpu, gpu_names)], dtype=bool
    )
    compute = iv.total(iv.merge(start[compute_mask], end[compute_mask]))
    out += [
        Comparison(name, "gpu span (us)", span / 1e3, float(hta_span)),
        Comparison(name, "idle time (us)", idle / 1e3, float(hta_idle)),
        Comparison(name, "compute time (us)", compute / 1e3, hta_compute),
    ]

    # Idle attribution per stream.
    hta_idle_df, _ = BreakdownAnalysis.get_idle_time_breakdown(ta.t, HTA_KERNEL_DELAY_US, rank, None, False)
    launch_ts = df["ts"].reindex(gpu["index_correlation"].to_numpy()).to_numpy()
    launch = np.where(np.isnan(launch_ts), -1, np.nan_to_num(launch_ts) * 1000).astype(np.int64)
    mine = idle_by_stream(np.zeros(len(gpu), np.int32), gpu["stream"].to_numpy(dtype=np.int64), start, end, launch,
                          short_gap_ns=HTA_KERNEL_DELAY_US * 1000)
    by_stream = {m.stream: m for m in mine}
    for category, attr in (("host_wait", "host_wait_s"), ("kernel_wait", "short_gap_s"), ("other", "other_s")):
        hta_total = float(hta_idle_df[hta_idle_df["idle_category"] == category]["idle_time"].sum())
        stave_total = sum(getattr(m, attr) for m in by_stream.values()) * 1e6
        out.append(Comparison(name, f"idle {category} (us)", stave_total, hta_total))
    return out


def whole_trace(path: Path, workdir: Path) -> list[Comparison]:
    """Comparison 2 (module docstring): each tool's public numbers on the whole trace."""
    from stave.trace.analysis import analyze_trace

    ta = _load_hta(path, workdir)
    hta = ta.get_temporal_breakdown(visualize=False).iloc[0]
    mine = analyze_trace(path)
    g = mine.gpu
    if g is None:
        return []
    return [
        Comparison(path.name, "whole: idle share", 1 - g.utilization, float(hta["idle_time_pctg"]) / 100),
        Comparison(path.name, "whole: compute kernel time (us)", g.compute_busy_s * 1e6, float(hta["compute_time(us)"])),
    ]


def main(argv: list[str] | None = None) -> int:
    """Print both comparisons for the traces given (default: the shared GPU fixtures)."""
    logging.disable(logging.WARNING)  # HTA logs a warning per rounded trace
    args = argv if argv is not None else sys.argv[1:]
    if args:
        paths = [Path(a) for a in args]
    else:
        fixtures = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "traces"
        paths = sorted(p for p in fixtures.glob("*.json.gz") if not p.name.startswith("cpu_only"))
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "a").mkdir()
        (Path(tmp) / "b").mkdir()
        for p in paths:
            for kind, rows in (("same events", same_events(p, Path(tmp) / "a")), ("whole trace", whole_trace(p, Path(tmp) / "b"))):
                for c in rows:
                    result_line(f"{c.trace[:48]:48s} {kind:12s} {c.metric:34s} stave {c.stave:14.1f}  hta {c.hta:14.1f}  "
                          f"diff {c.rel_diff:7.2%}")
                    if kind == "same events":
                        worst = max(worst, c.rel_diff if c.hta > 1 else 0.0)
            shutil.rmtree(Path(tmp) / "a", ignore_errors=True)
            shutil.rmtree(Path(tmp) / "b", ignore_errors=True)
            (Path(tmp) / "a").mkdir()
            (Path(tmp) / "b").mkdir()
    result_line(f"largest same-events difference: {worst:.3%}")
    return 0 if worst <= 0.01 else 1


if __name__ == "__main__":
    sys.exit(main())
