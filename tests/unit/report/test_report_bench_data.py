"""``stave bench data``'s table is rendered from its report dict (report/bench_data.py)."""

from __future__ import annotations

from rich.console import Console

from stave.report.bench_data import render_data_bench


def _row(key: str, rate: float) -> dict:
    return {"key": key, "pipeline": f"({key})", "config": "auto", "threads": 3, "images_per_s": rate,
            "images_per_s_min": rate * 0.9, "images_per_s_max": rate * 1.1, "cpu_s_per_image": 0.002,
            "peak_rss_bytes": 300 * 2**20}


def test_the_table_shows_every_contender_relative_to_the_baseline_and_the_goals() -> None:
    report = {
        "workload": {"images": 128, "batch_size": 32},
        "machine": {"cores": 2},
        "results": [_row("baseline", 100.0), _row("stave", 250.0)],
        "decode_ceiling": {"binding": "pillow", "cores": 2, "images_per_s": 400.0},
        "baseline_search": [{"config": "workers=2", "images_per_s": 100.0}],
        "goals": {"stave_vs_baseline": {"median": 2.5, "min": 2.4, "max": 2.6, "goal": 2.0, "met": True},
                  "stave_threads_vs_processes": {"median": 1.1, "min": 1.0, "max": 1.2}},
    }
    console = Console(record=True, width=200)
    render_data_bench(report, console)
    text = console.export_text()
    assert "stave bench data: 128 JPEGs, batch 32, 2 cores" in text
    assert "auto -> 3" in text and "2.50" in text and "4.00" in text  # x (1): 250/100, ceiling 400/100
    assert "stave_vs_baseline: 2.50 [2.40-2.60] (goal >= 2.0: met)" in text
    assert "stave_threads_vs_processes: 1.10 [1.00-1.20]" in text
