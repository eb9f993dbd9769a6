"""``stave bench data``'s terminal report: the contenders, the baseline search and the goals.

The runner (:func:`stave.data.benchmark.run`) measures and returns the ``stave.bench.data/1``
dict; this renders it.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def render_data_bench(report: dict[str, Any], console: Console) -> None:
    """The results table, the baseline search and the goals of a ``stave.bench.data/1`` report."""
    base = next(r for r in report["results"] if r["key"] == "baseline")["images_per_s"]
    table = Table(title=f"stave bench data: {report['workload']['images']} JPEGs, batch {report['workload']['batch_size']}, {report['machine']['cores']} cores")
    for column in ("pipeline", "config", "images/s", "spread", "x (1)", "CPU-s/img", "peak RSS MB"):
        table.add_column(column, justify="left" if column in ("pipeline", "config") else "right")
    for r in report["results"]:
        config = r["config"].replace("auto", f"auto -> {r['threads']}") if "threads" in r else r["config"]
        table.add_row(r["pipeline"], config, f"{r['images_per_s']:.0f}", f"{r['images_per_s_min']:.0f}-{r['images_per_s_max']:.0f}", f"{r['images_per_s'] / base:.2f}", f"{r['cpu_s_per_image'] * 1e3:.2f} ms", f"{r['peak_rss_bytes'] / 2**20:.0f}")
    ceiling = report["decode_ceiling"]
    table.add_row(f"decode ceiling ({ceiling['binding']}, 1 thread x {ceiling['cores']} cores)", "full decode", f"{ceiling['images_per_s']:.0f}", "", f"{ceiling['images_per_s'] / base:.2f}", "", "")
    console.print(table)
    search = Table(title="baseline search: torchvision ImageFolder + PIL (one window each)")
    search.add_column("config")
    search.add_column("images/s", justify="right")
    for r in report["baseline_search"]:
        search.add_row(r["config"], f"{r['images_per_s']:.0f}")
    console.print(search)
    for name, goal in report["goals"].items():
        status = "" if "goal" not in goal else f" (goal >= {goal['goal']}: {'met' if goal['met'] else 'NOT met'})"
        console.print(f"{name}: {goal['median']:.2f} [{goal['min']:.2f}-{goal['max']:.2f}]{status}")

