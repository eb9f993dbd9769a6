"""The ladder on a script (``stave bench ladder SCRIPT``): the terminal table and summary, and the JSON.

The table is the ladder's own (:func:`stave.report.bench_table.ladder_table`: one row per rung);
the summary says what differs for a script: each window is a run of the script in its own process,
the loss check compares with the script's own first run, the fed ratio is not measured.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.text import Text

from stave.bench.result import RungResult, ScriptLadderResult, Trial
from stave.measure.serialize import json_safe
from stave.report.bench_table import ladder_table

SCHEMA = "stave.bench.script/1"


def summary_lines(result: ScriptLadderResult) -> list[str]:
    """The lines under the table: speedup, loss check, fed ratio, load, notes."""
    if result.best_speedup is None:
        lines = [f"INCOMPLETE ({result.incomplete or 'stopped early'}): the rungs above were measured; the fixes "
                 f"kept so far are {result.chain_speedup:.2f}x the script as written by the product of the kept "
                 "rungs' ratios (no side-by-side run)"]
    else:
        lines = [f"best kept configuration: {result.final.label()}: {result.final_samples_per_s or 0:,.1f} samples/s, "
                 f"{result.best_speedup:.2f}x the script as written ({result.baseline_samples_per_s or 0:,.1f}; "
                 f"side by side, ±{result.best_speedup_noise or 0:.0%}; product of the kept rungs' ratios "
                 f"{result.chain_speedup:.2f}x)"]
    options = result.options
    lines.append(f"each window: one run of the script in its own process, {options['warmup_steps']} warm-up + "
                 f"{options['steps']} timed steps; {result.runs} runs in {result.duration_s:.0f} s")
    check = result.loss_check
    lines.append(f"loss check (same seed, against the script's own first run): first {check['steps']} losses within "
                 f"{check['tolerance']:.1%} for fixes that can change the arithmetic; input channel statistics "
                 f"within {check['input_tolerance']:g} sd for every fix")
    lines.append(f"fed ratio: {result.fed.get('reason') or 'not measured'}")
    load, end = result.machine.get("load_avg_1m"), result.machine.get("load_avg_1m_end")
    cores = result.machine.get("cores_usable") or 1
    if load is not None and end is not None and max(load, end) > cores:
        lines.append(f"note: load average {load:.1f} -> {end:.1f} on {cores} cores: the machine was busy, "
                     "ratios are noisy")
    return lines + [f"note: {n}" for n in result.notes]


def script_report(result: ScriptLadderResult) -> Group:
    """Table and summary lines as one renderable."""
    return Group(ladder_table(result), *[Text(line) for line in summary_lines(result)])  # type: ignore[arg-type]


def _trial(trial: Trial) -> dict[str, Any]:
    return {
        "label": trial.label,
        "fixes": trial.config.to_dict(),
        "samples_per_s": trial.samples_per_s,
        "ratio": trial.ratio,
        "noise": trial.noise,
        "x_baseline": trial.x_baseline,
        "window_rates": list(trial.window_rates),
        "max_loss_dev": trial.max_loss_dev,
        "input_dev": trial.input_dev,
        "loss_passed": trial.loss_passed,
        "accepted": trial.accepted,
        "reason": trial.reason,
        "revert_kind": trial.revert_kind,
    }


def _rung(rung: RungResult) -> dict[str, Any]:
    return {"name": rung.name, "title": rung.title, "status": rung.status, "reason": rung.reason,
            "revert_kind": rung.revert_kind, "kept": rung.chosen.label if rung.chosen is not None else None,
            "trials": [_trial(t) for t in rung.trials]}


def to_json(result: ScriptLadderResult) -> dict[str, Any]:
    """The result as JSON (schema ``stave.bench.script/1``; NaN and inf as null)."""
    return json_safe({
        "schema": SCHEMA,
        "script": result.script,
        "args": list(result.args),
        "machine": result.machine,
        "options": result.options,
        "baseline_samples_per_s": result.baseline_samples_per_s,
        "final_samples_per_s": result.final_samples_per_s,
        "best_speedup": result.best_speedup,
        "best_speedup_noise": result.best_speedup_noise,
        "chain_speedup": result.chain_speedup,
        "final_fixes": result.final.to_dict(),
        "final_changes_learning": result.final.changes_learning(),
        "fed": result.fed,
        "loss_check": result.loss_check,
        "code": result.code,
        "runs": result.runs,
        "duration_s": result.duration_s,
        "notes": list(result.notes),
        "incomplete": result.incomplete,
        "rungs": [_rung(r) for r in result.rungs],
    })
