"""The words of the doctor report, shared by the terminal and HTML renderers.

What each counter is called and how it is formatted, the header lines, the loader lines: both
renderers take them from here, so the terminal and the HTML say the same thing the same way.
Inputs are parts of the ``stave.doctor/1`` dict.
"""

from __future__ import annotations

import shlex
from typing import Any, Callable

from stave.measure.steps import PHASES
from stave.report.findings_view import display_location
from stave.report.units import NA, fmt_byte_rate, fmt_bytes, fmt_count, fmt_pct, fmt_seconds, sig

Formatter = Callable[[Any], str]


def _watts(value: float | None) -> str:
    return NA if value is None else f"{sig(value)} W"


# (label, counter of HostSample, formatter) in reading order.
HOST_ROWS: tuple[tuple[str, str, Formatter], ...] = (
    ("CPU, main process (% of a core)", "cpu_main_pct", fmt_pct),
    ("CPU, loader workers (% of a core)", "cpu_workers_pct", fmt_pct),
    ("CPU, whole machine", "cpu_system_pct", fmt_pct),
    ("CPU steal (hypervisor's other guests)", "cpu_steal_pct", fmt_pct),
    ("iowait", "iowait_pct", fmt_pct),
    ("disk reads", "disk_read_bytes_per_s", fmt_byte_rate),
    ("RSS, process tree", "rss_bytes", fmt_bytes),
    ("memory available", "mem_available_bytes", fmt_bytes),
    ("swap in", "swap_in_bytes_per_s", fmt_byte_rate),
    ("swap out", "swap_out_bytes_per_s", fmt_byte_rate),
    ("pressure, CPU (PSI some)", "psi_cpu_some_pct", fmt_pct),
    ("pressure, memory (PSI some)", "psi_memory_some_pct", fmt_pct),
    ("pressure, I/O (PSI some)", "psi_io_some_pct", fmt_pct),
)

# Rows left out where the counter was not read (steal: only /proc/stat on Linux and psutil say it),
# rather than an "n/a" on every machine that has none to report.
ROWS_ONLY_WHEN_MEASURED = frozenset({"cpu_steal_pct"})

# Device rows, shown when the run used a GPU (on a CPU run they would all read "n/a").
GPU_ROWS: tuple[tuple[str, str, Formatter], ...] = (
    ("GPU utilization", "gpu_util_pct", fmt_pct),
    ("GPU memory used", "gpu_mem_used_bytes", fmt_bytes),
    ("GPU power", "gpu_power_w", _watts),
    ("CUDA memory allocated", "cuda_allocated_bytes", fmt_bytes),
    ("CUDA peak allocated", "cuda_peak_bytes", fmt_bytes),
)

_STOPPED_BY = {
    "end": "the script finished",
    "steps": "stopped after --steps",
    "error": "the script raised",
    "interrupt": "interrupted (Ctrl-C)",
    "exit": "the script called sys.exit",
}


def utilization_rows(report: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(label, mean, min, max) of each counter over the summary's window; absent ones read "n/a"."""
    util = report["summary"].get("utilization") or {}
    rows = HOST_ROWS + (GPU_ROWS if report["config"].get("device_type") == "cuda" else ())
    if no_workers_reason(report) is not None:  # no worker processes: the row would only say "n/a"
        rows = tuple(r for r in rows if r[1] != "cpu_workers_pct")
    out = []
    for label, key, fmt in rows:
        stat = util.get(key)
        if stat is None and key in ROWS_ONLY_WHEN_MEASURED:
            continue
        out.append((label, NA, NA, NA) if stat is None else (label, fmt(stat["mean"]), fmt(stat["min"]),
                                                              fmt(stat["max"])))
    return out


def utilization_window(report: dict[str, Any]) -> str:
    """Which samples the utilization table covers, in words."""
    util = report["summary"].get("utilization") or {}
    where = {"counted_steps": "the counted steps", "steps": "all steps"}.get(util.get("window"), "the whole run")
    reason = no_workers_reason(report)
    workers = f"; no loader workers ({reason})" if reason else ""
    return f"over {where} ({util.get('samples', 0)} samples){workers}"


def header_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """Script, machine, device, software, steps, exit and wall time."""
    run, config, summary = report["run"], report["config"], report["summary"]
    # A script under the working directory is named relative to it (what the reader can open from there).
    path = run.get("script", "")
    script = ("-m " + path) if run.get("module") else (display_location(path) if path else "")
    command = " ".join([script, *map(shlex.quote, run.get("args", []))]).strip() or NA
    cores = f"{_opt(run.get('cores_usable'))} of {_opt(run.get('cores_total'))} cores"
    machine = (f"{run.get('hostname') or NA} · {run.get('cpu_model') or NA} · {cores} · "
               f"{fmt_bytes(run.get('ram_total_bytes'))} RAM")
    software = (f"torch {run.get('torch_version') or NA} · Python {run.get('python_version') or NA} · "
                f"stave {run.get('stave_version') or NA}")
    world = f" · rank {run['rank']} of {run['world_size']}" if run.get("world_size", 1) > 1 else ""
    steps = f"{summary['steps']} counted of {summary['total_steps']} ({run.get('warmup_steps', 0)} warm-up){world}"
    return [
        ("script", command),
        ("machine", machine),
        ("device", device_text(config)),
        ("software", software),
        ("steps", steps),
        ("exit", exit_text(run)),
        ("wall", fmt_seconds(run.get("wall_s"))),
    ]


def _opt(value: Any) -> str:
    return NA if value is None else str(value)


def device_text(config: dict[str, Any]) -> str:
    """The compute device in one line."""
    if config.get("device_type") == "cuda":
        cap = config.get("device_capability")
        extra = f", compute capability {cap[0]}.{cap[1]}" if cap and len(cap) == 2 else ""
        return f"cuda · {config.get('device_name') or NA} · {fmt_bytes(config.get('device_total_memory_bytes'))}{extra}"
    return f"{config.get('device_type') or NA} (no GPU used)"


def exit_text(run: dict[str, Any]) -> str:
    """The script's exit code, how the run stopped, and the error if it raised."""
    code = run.get("script_exit_code")
    how = _STOPPED_BY.get(run.get("stopped_by", ""), run.get("stopped_by", ""))
    text = f"{_opt(code)} ({how})" if how else _opt(code)
    if run.get("error"):
        text += f": {run['error']}"
    return text


def loader_text(loader: dict[str, Any]) -> str:
    """One DataLoader's speed-relevant settings and its first-batch wait, in one line."""
    size = f" ({fmt_count(loader['dataset_len'])} samples)" if loader.get("dataset_len") is not None else ""
    waits = loader.get("first_batch_wait_s") or []
    first = f"; first batch after {fmt_seconds(max(waits))}" if waits else ""
    return (
        f"loader {loader['loader_id']}: {loader.get('dataset_type', '?')}{size}, batch "
        f"{_opt(loader['batch_size'])}, {loader['num_workers']} worker{'' if loader['num_workers'] == 1 else 's'}, "
        f"pin_memory {_on(loader['pin_memory'])}, "
        f"persistent_workers {_on(loader['persistent_workers'])}, prefetch_factor {_opt(loader['prefetch_factor'])}"
        f"{first}"
    )


def _on(flag: bool) -> str:
    return "on" if flag else "off"


def io_text(io: dict[str, Any]) -> str:
    """The main loader's I/O per sample in one line (``data_pipeline.io``)."""
    return (
        f"loader {io['loader_id']} I/O per sample: {_num(io['opens_per_sample'])} opens, "
        f"{_num(io['reads_per_sample'])} reads, "
        f"{fmt_bytes(io['bytes_per_read'])} per read, {fmt_bytes(io['read_bytes_per_sample'])} from storage"
    )


def _num(value: float | None) -> str:
    return NA if value is None else sig(value)


def stack_text(summary: dict[str, Any]) -> str:
    """How many stack samples the top-lines table rests on, and how often they were taken."""
    text = f"{summary['stack_samples']} stack samples"
    if summary.get("stack_interval_s"):
        text += f", one every {fmt_seconds(summary['stack_interval_s'])}"
    return text


def line_location(hot: dict[str, Any]) -> str:
    """A source location as "file.py:12 function" (the directory is in the JSON)."""
    return f"{hot['file'].rsplit('/', 1)[-1]}:{hot['line']} {hot['function']}"


def rank_host(rank: dict[str, Any]) -> str:
    """A rank's "host:pid" ("n/a" for a rank that left no record)."""
    return f"{rank['hostname']}:{rank['pid']}" if rank.get("hostname") else NA


def shown_phases(summary: dict[str, Any]) -> tuple[str, ...]:
    """The step phases a report shows: the host→device phase only when the run copied anything to a
    device (on a CPU-only run, or with the data already on the device, it is zero by construction)."""
    h2d = (summary.get("phase_s") or {}).get("h2d") or {}
    copied = bool(h2d.get("mean")) or bool(summary.get("h2d_bytes_per_step"))
    return tuple(p for p in PHASES if p != "h2d" or copied)


def no_workers_reason(report: dict[str, Any]) -> str | None:
    """Why the run has no DataLoader worker processes ("num_workers=0", "no DataLoader was iterated"),
    or None when it had some."""
    loaders = report["config"].get("loaders") or []
    if not loaders:
        return "no DataLoader was iterated"
    if all(not ld.get("num_workers") for ld in loaders):
        return "num_workers=0" if len(loaders) == 1 else "num_workers=0 in every DataLoader"
    return None


def workload_lines(summary: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """Language-model and framework facts, one line each, only those the run showed.

    From ``summary``: tokens/s with and without padding, evaluation's share of the wall time, MFU.
    From ``config``: the framework that drove the loop and the attention implementation/kernel.
    """
    lines = []
    if summary.get("tokens_per_s") is not None:
        real = summary.get("real_tokens_per_s")
        pad = 1.0 - summary["real_tokens_per_step"] / summary["tokens_per_step"] if summary["tokens_per_step"] else 0.0
        lines.append(
            f"{summary['tokens_per_s']:,.0f} tokens/s ({summary['tokens_per_step']:,.0f} per step) · "
            f"{real:,.0f} real tokens/s ({pad:.0%} padding)"
        )
    if summary.get("eval_share"):
        lines.append(f"evaluation: {summary['eval_share']:.0%} of the wall time ({fmt_seconds(summary['eval_s'])} per step), "
                     "left out of the step time")
    mfu = summary.get("mfu")
    if mfu:
        lines.append(f"MFU {mfu['value']:.1%} ({sig(mfu['flops_per_step'] / 1e9)} GFLOP per step; peak: {mfu['peak_source']})")
    if config.get("framework"):
        version = f" {config['framework_version']}" if config.get("framework_version") else ""
        lines.append(f"framework: {config['framework']}{version} (fixes use its switches)")
    attention = []
    if config.get("attn_implementation"):
        attention.append(f'attn_implementation="{config["attn_implementation"]}"')
    kernels = config.get("sdpa_kernels") or {}
    if kernels:
        attention.append("SDPA kernel " + ", ".join(sorted(k.replace("scaled_dot_product_", "") for k in kernels)))
    elif config.get("sdpa_calls"):
        attention.append("SDPA ran the math path")
    if attention:
        lines.append("attention: " + "; ".join(attention))
    return lines
