"""Tables of the doctor's terminal report: utilization, data pipeline, host-device, hot lines, ranks.

Each function takes parts of the ``stave.doctor/1`` dict (so the terminal shows exactly what the
JSON holds) and returns a rich renderable. Strings from the user's job are wrapped in ``Text`` so
rich never parses them as markup.
"""

from __future__ import annotations

from typing import Any, Sequence

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from stave.measure.steps import PHASES
from stave.report import doctor_wording as dt
from stave.report.palette import PHASE_COLORS, PHASE_LABELS
from stave.report.units import NA, fmt_bar, fmt_bytes, fmt_count, fmt_rate, fmt_seconds, fmt_share, fmt_us, sig

# Beyond this many loader workers the table shows the first ones and a total row; 64 rows of
# near-identical workers hide the outlier instead of showing it.
MAX_WORKER_ROWS = 8

# Width of the share bars in the stage table (the stage name and numbers take the rest of 100).
STAGE_BAR_WIDTH = 20

def _table(*columns: str, right_from: int = 1, title: str | None = None, gap: int = 3) -> Table:
    table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False, show_edge=False,
                  padding=(0, gap - 1, 0, 0))  # the box's column separator is the gap's last space
    for i, name in enumerate(columns):
        table.add_column(name, justify="right" if i >= right_from else "left")
    return table


def utilization_table(report: dict[str, Any]) -> RenderableType:
    """Mean/min/max of the host (and, on a GPU, device) counters; absent ones read "n/a"."""
    util = report["summary"].get("utilization")
    if not util or not util.get("samples"):
        return Text("no machine samples were taken")
    table = _table("", "mean", "min", "max", title=dt.utilization_window(report))
    for row in dt.utilization_rows(report):
        table.add_row(*row)
    return table


def pipeline_group(report: dict[str, Any]) -> RenderableType:
    """Loader settings, stage times and worker accounts (one line when no loader ran)."""
    loaders = [Text(dt.loader_text(ld)) for ld in report["config"].get("loaders", [])]
    pipeline = report["data_pipeline"]
    if not (loaders or pipeline["stages"] or pipeline["workers"]):
        return Text("no DataLoader was iterated")
    parts = [*loaders, stages_table(pipeline)]
    workers = workers_table(pipeline)
    if workers is not None:
        parts.append(workers)
    return Group(*parts)


def stages_table(pipeline: dict[str, Any]) -> RenderableType:
    """Time per sample of each loader stage (load, each transform, collate) and its share."""
    stages = pipeline.get("stages", [])
    if not stages:
        return Text("no loader stages were measured")
    table = _table("stage", "where", "per sample", "CPU", "off-CPU", "share", "", right_from=2)
    several = len({st["loader_id"] for st in stages}) > 1
    for st in stages:
        where = f"{st['where']}, loader {st['loader_id']}" if several else st["where"]
        table.add_row(
            Text(st["name"]),
            where,
            fmt_us(st["wall_per_sample_s"]),
            fmt_us(st["cpu_per_sample_s"]),
            fmt_share(st["off_cpu_frac"]),
            fmt_share(st["share"]),
            Text(fmt_bar(st["share"], STAGE_BAR_WIDTH), justify="left"),
        )
    return table


def workers_table(pipeline: dict[str, Any]) -> RenderableType | None:
    """Per loader worker: samples, time per sample, CPU share and I/O counters per sample."""
    workers = pipeline.get("workers", [])
    if not workers:
        return None
    io = pipeline["io"]
    head = Text(dt.io_text(io) if io is not None else "worker I/O: no worker reported its counters")
    table = _table("worker", "pid", "samples", "time", "on CPU", "opens", "reads", "bytes/read",
                   title="per worker; time, opens and reads per sample")
    for w in workers[:MAX_WORKER_ROWS]:
        table.add_row(
            "main" if w["worker_id"] < 0 else f"{w['loader_id']}/{w['worker_id']}",
            str(w["pid"]),
            fmt_count(w["samples"]),
            fmt_us(w["getitem_per_sample_s"]),
            fmt_share(w["getitem_cpu_frac"]),
            _num(w["opens_per_sample"]),
            _num(w["reads_per_sample"]),
            fmt_bytes(w["bytes_per_read"]),
        )
    hidden = len(workers) - MAX_WORKER_ROWS
    if hidden > 0:
        table.add_row(f"+{hidden} more", "", fmt_count(sum(w["samples"] for w in workers[MAX_WORKER_ROWS:])),
                      "", "", "", "", "")
    return Group(head, table)


def _num(value: float | None) -> str:
    return NA if value is None else sig(value)


def device_tables(device: dict[str, Any], steps: int) -> RenderableType | None:
    """Host-device copies and syncing call sites, or ``None`` when the run made none."""
    parts: list[RenderableType] = []
    copies = [c for c in device.get("copies", []) if c["count"]]
    if copies:
        table = _table("direction", "dtype", "memory", "mode", "per step", "bytes/step", right_from=4)
        for c in copies:
            table.add_row(
                c["direction"], c["dtype"], "pinned" if c["pinned"] else "pageable",
                "non_blocking" if c["non_blocking"] else "blocking",
                _num(c["count"] / steps) if steps else NA,
                fmt_bytes(c["bytes"] / steps) if steps else NA,
            )
        parts.append(table)
    syncs = device.get("syncs", [])
    if syncs:
        table = _table("sync", "line", "calls", "steps with one", right_from=2)
        for s in syncs:
            where = dt.line_location(s)
            table.add_row(Text(s["kind"]), Text(where), fmt_count(s["calls"]), fmt_count(s["steps_with_call"]))
        parts.append(table)
    calls = {k: v for k, v in device.get("cuda_calls", {}).items() if v}
    if calls:
        parts.append(Text("torch.cuda calls: " + ", ".join(f"{k} x{v}" for k, v in sorted(calls.items()))))
    return Group(*parts) if parts else None


def hot_lines_table(hot_lines: list[dict[str, Any]], stack_samples: int) -> RenderableType:
    """The user's lines the main thread was found on most, with the phase they ran in."""
    if not stack_samples:
        return Text("no stack samples were taken")
    if not hot_lines:
        return Text("no stack sample fell in the user's code")
    table = _table("share", "phase", "line", "code", right_from=0)
    # Only the code column gives way on a narrow terminal: share, phase and location are the data.
    table.columns[0].min_width = 6
    table.columns[1].justify = "left"
    table.columns[1].min_width = max(len(label) for label in PHASE_LABELS.values())
    table.columns[2].justify = "left"
    table.columns[2].no_wrap = True
    table.columns[3].justify = "left"
    table.columns[3].overflow = "ellipsis"  # the code is a reminder; the location is the reference
    table.columns[3].no_wrap = True
    for hl in hot_lines:
        where = dt.line_location(hl)
        phase = hl["phase"] or ""
        table.add_row(
            fmt_share(hl["share"]),
            Text(PHASE_LABELS.get(phase, phase), style=PHASE_COLORS.get(phase, "")),
            Text(where),
            Text(hl["code"] or ""),
        )
    return table


def ranks_table(ranks: list[dict[str, Any]], phases: Sequence[str] = PHASES) -> RenderableType:
    """Every rank side by side: step time, throughput, the breakdown's shares (of ``phases``), the
    wait inside collectives and peak memory (GPU where there is one, else the process tree's RSS)."""
    short = {"data_wait": "data", "h2d": "h2d", "forward": "fwd", "backward": "bwd", "optimizer": "opt",
             "other": "other"}
    table = _table("rank", "host:pid", "status", "median", "samples/s", *(short[p] for p in phases),
                   "comm wait", "peak mem", right_from=3, gap=1)
    table.columns[1].no_wrap = True
    table.columns[2].no_wrap = True
    for r in ranks:
        st = r["step_time_s"]
        peak = r.get("peak_cuda_bytes") if r.get("peak_cuda_bytes") is not None else r.get("peak_rss_bytes")
        table.add_row(
            str(r["rank"]),
            Text(dt.rank_host(r)),
            Text(r["status"], style="" if r["status"] == "ok" else "bold red"),
            fmt_seconds(st["median"]),
            fmt_rate(r["samples_per_s"], ""),
            *(fmt_share(r["breakdown"][p]) for p in phases),
            fmt_seconds(r.get("comm_wait_s")),
            fmt_bytes(peak),
        )
    return table
