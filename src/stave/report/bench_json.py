"""The ladder's result as JSON in the ``stave.bench/1`` schema (docs/schema.md).

Rates are samples per second (``*_per_s``); token workloads add ``tokens_per_s`` beside them.
A value that could not be measured is ``null``, never 0; non-finite numbers (a loss that turned
NaN) become ``null`` too, since JSON has no NaN.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from stave.bench.result import LadderResult, RungResult, Trial
from stave.measure.serialize import json_safe

SCHEMA = "stave.bench/1"
SCHEMA_FILE = "stave.bench-1.schema.json"


def _num(value: float | None) -> float | None:
    """A measured number as a JSON float (the schema's numbers are floats), ``None`` if absent or not finite."""
    return None if value is None else json_safe(float(value))


def _tokens(rate: float | None, result: LadderResult) -> float | None:
    if rate is None or result.unit != "tokens":
        return None
    return rate * result.items_per_sample


def trial_json(trial: Trial, result: LadderResult) -> dict[str, Any]:
    """One timed candidate."""
    out = {
        "label": trial.label,
        "changes": trial.changes,
        "samples_per_s": _num(trial.samples_per_s),
        "ratio": _num(trial.ratio),
        "noise": _num(trial.noise),
        "x_baseline": _num(trial.x_baseline),
        "data_wait_share": _num(trial.data_wait_share),
        "peak_mem_bytes": trial.peak_mem_bytes,
        "max_loss_dev": _num(trial.max_loss_dev),
        "output_dev": _num(trial.output_dev),
        "input_dev": _num(trial.input_dev),
        "targets_match": trial.targets_match,
        "loss_tolerance": _num(trial.loss_tolerance),
        "loss_passed": trial.loss_passed,
        "compile_s": _num(trial.compile_s),
        "window_samples_per_s": [_num(r) for r in trial.window_rates],
        "accepted": trial.accepted,
        "reason": trial.reason,
    }
    if result.unit == "tokens":
        out["tokens_per_s"] = _tokens(trial.samples_per_s, result)
    return out


def rung_json(rung: RungResult, result: LadderResult) -> dict[str, Any]:
    """One rung: the shown trial's numbers at top level, every trial below."""
    shown = rung.shown
    out: dict[str, Any] = {
        "name": rung.name,
        "title": rung.title,
        "status": rung.status,
        "kept": rung.kept,
        "reason": rung.reason,
        "setting": shown.label if shown else None,
        "changes": shown.changes if shown else {},
        "samples_per_s": _num(shown.samples_per_s) if shown else None,
        "x_baseline": _num(shown.x_baseline) if shown else None,
        "ratio": _num(shown.ratio) if shown else None,
        "noise": _num(shown.noise) if shown else None,
        "data_wait_share": _num(shown.data_wait_share) if shown else None,
        "peak_mem_bytes": shown.peak_mem_bytes if shown else None,
        "max_loss_dev": _num(shown.max_loss_dev) if shown else None,
        "output_dev": _num(shown.output_dev) if shown else None,
        "input_dev": _num(shown.input_dev) if shown else None,
        "compile_s": _num(shown.compile_s) if shown else None,
        "trials": [trial_json(t, result) for t in rung.trials],
    }
    if result.unit == "tokens":
        out["tokens_per_s"] = _tokens(out["samples_per_s"], result)
    return out


def to_json(result: LadderResult) -> dict[str, Any]:
    """The whole report as a JSON-able dict."""
    mfu = {
        k: (_num(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v) for k, v in result.mfu.items()
    }
    return {
        "schema": SCHEMA,
        "workload": {
            "name": result.workload,
            "description": result.description,
            "unit": result.unit,
            "items_per_sample": result.items_per_sample,
        },
        "machine": result.machine,
        "options": result.options,
        "baseline_samples_per_s": _num(result.baseline_samples_per_s),
        "final_samples_per_s": _num(result.final_samples_per_s),
        "baseline_tokens_per_s": _tokens(result.baseline_samples_per_s, result),
        "final_tokens_per_s": _tokens(result.final_samples_per_s, result),
        "best_speedup": _num(result.best_speedup),
        "best_speedup_noise": _num(result.best_speedup_noise),
        "chain_speedup": _num(result.chain_speedup),
        "fed_ratio": _num(result.fed_ratio),
        "fed": {k: _num(v) for k, v in result.fed.items()},
        "mfu": mfu,
        "loss_check": result.loss_check,
        "baseline_config": result.baseline.to_dict(),
        "final_config": result.final.to_dict(),
        "code": result.code,
        "duration_s": _num(result.duration_s),
        "notes": list(result.notes),
        "rungs": [rung_json(r, result) for r in result.rungs],
    }


def load_schema() -> dict[str, Any]:
    """The JSON Schema of ``stave.bench/1`` shipped with stave."""
    text = resources.files("stave.report").joinpath("schemas", SCHEMA_FILE).read_text(encoding="utf-8")
    return json.loads(text)
