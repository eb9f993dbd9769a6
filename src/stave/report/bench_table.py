"""The ladder as a terminal table (rich renderables; the CLI prints them).

One row per rung, read top to bottom like seed 002's narrative: what was tried, how fast it ran,
how far above the baseline that is, whether it was kept, and why.
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from stave.bench.result import BASELINE, KEPT, REVERTED, LadderResult, RungResult

STATUS_STYLES = {KEPT: "bold green", BASELINE: "bold", REVERTED: "yellow", "skipped": "dim"}


def rate_label(result: LadderResult) -> str:
    """Column heading of the throughput: samples/s or tokens/s."""
    return "tokens/s" if result.unit == "tokens" else "samples/s"


def scaled_rate(result: LadderResult, samples_per_s: float | None) -> float | None:
    """A samples/s rate in the workload's unit."""
    if samples_per_s is None:
        return None
    return samples_per_s * (result.items_per_sample if result.unit == "tokens" else 1)


def _fmt(value: float | None, spec: str, empty: str = "-") -> str:
    return empty if value is None else format(value, spec)


def _mem(value: int | None) -> str:
    if not value:
        return "-"
    return f"{value / 2**30:.1f} GiB" if value >= 2**30 else f"{value / 2**20:.0f} MiB"


def _row(result: LadderResult, rung: RungResult) -> list[Text | str]:
    shown = rung.shown
    status = Text(rung.status, style=STATUS_STYLES.get(rung.status, ""))
    if shown is None:
        return [rung.title, "-", "-", "-", "-", "-", status, rung.reason]
    dev = shown.max_loss_dev
    return [
        rung.title,
        shown.label if rung.status != BASELINE else "as written",
        _fmt(scaled_rate(result, shown.samples_per_s), ",.1f"),
        _fmt(shown.x_baseline, ".2f") + ("x" if shown.x_baseline is not None else ""),
        _fmt(None if shown.data_wait_share is None else shown.data_wait_share * 100, ".0f")
        + ("%" if shown.data_wait_share is not None else ""),
        "-" if dev is None else ("inf" if dev == float("inf") else f"{dev:.2%}"),
        status,
        rung.reason,
    ]


def ladder_table(result: LadderResult) -> Table:
    """The per-rung table."""
    machine = result.machine
    table = Table(
        title=f"stave bench ladder: {result.workload} on {machine.get('device_name', '?')} "
        f"({machine.get('cores_usable', '?')} cores)",
        title_justify="left",
        expand=False,
    )
    table.add_column("rung")
    table.add_column("setting")
    table.add_column(rate_label(result), justify="right")
    table.add_column("x base", justify="right")
    table.add_column("wait", justify="right")
    table.add_column("loss dev", justify="right")
    table.add_column("status")
    table.add_column("reason", overflow="fold")
    for rung in result.rungs:
        table.add_row(*_row(result, rung))
    return table


def summary_lines(result: LadderResult) -> list[str]:
    """The lines under the table: speedup, fed ratio, MFU, loss tolerance, load."""
    unit = rate_label(result)

    def rate(samples_per_s: float | None) -> str:
        return _fmt(scaled_rate(result, samples_per_s), ",.1f")

    if result.best_speedup is None:
        lines = [
            f"INCOMPLETE ({result.incomplete or 'stopped early'}): the rungs above were measured; the kept "
            f"configuration so far is {result.chain_speedup:.2f}x the baseline by the product of the kept "
            "rungs' ratios (no side-by-side or fed comparison ran)",
        ]
    else:
        lines = [
            f"best kept configuration: {rate(result.final_samples_per_s)} {unit}, "
            f"{result.best_speedup:.2f}x the baseline's {rate(result.baseline_samples_per_s)} "
            f"(timed side by side, ±{result.best_speedup_noise or 0:.0%}; "
            f"product of the kept rungs' ratios {result.chain_speedup:.2f}x)",
        ]
    fed = result.fed
    if fed.get("ratio") is not None:
        lines.append(
            f"fed ratio: {fed['ratio']:.3f} (real input pipeline {rate(fed['real_samples_per_s'])} "
            f"vs one device batch fed over and over {rate(fed['fed_samples_per_s'])} {unit})"
        )
    mfu = result.mfu
    if mfu.get("final") is not None:
        lines.append(
            f"MFU: {mfu['baseline']:.1%} ({mfu['baseline_peak_dtype']} peak) -> {mfu['final']:.1%} "
            f"({mfu['final_peak_dtype']} peak; {mfu['peak_source']})"
        )
    elif mfu.get("uncounted_ops"):
        ops = mfu["uncounted_ops"]
        lines.append(f"MFU: not known ({', '.join(ops)} {'has' if len(ops) == 1 else 'have'} no FLOP formula "
                     "in torch.utils.flop_counter)")
    compiles = [t.compile_s for r in result.rungs for t in r.trials if t.compile_s is not None]
    if compiles:
        lines.append(f"torch.compile: {max(compiles):.1f} s of compilation before the first step (not in the rates)")
    check = result.loss_check
    lines.append(
        f"loss check (same weights, same samples, vs fp32): first {check['steps']} losses within "
        f"max({check['tolerance']:.0%}, {check.get('noise_factor', 0):g}x the job's bf16-rounding sensitivity); "
        f"input channel statistics within {check.get('input_tolerance', 0):g} sd; same targets; "
        f"first outputs within {check.get('output_tolerance', 0):.0%}"
    )
    load, end = result.machine.get("load_avg_1m"), result.machine.get("load_avg_1m_end")
    cores = result.machine.get("cores_usable") or 1
    if load is not None and end is not None and max(load, end) > cores:
        lines.append(
            f"note: load average {load:.1f} -> {end:.1f} on {cores} cores: the machine was busy, ratios are noisy"
        )
    return lines + list(result.notes)


def ladder_report(result: LadderResult) -> Group:
    """Table and summary lines as one renderable."""
    return Group(ladder_table(result), *[Text(line) for line in summary_lines(result)])
