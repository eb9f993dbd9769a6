"""The stave.doctor/1 JSON report: shape, honesty about absent counters, and schema validation."""

from __future__ import annotations

import copy
import json
import math
import sys

import pytest

from stave.doctor.result import DoctorResult
from stave.diagnose.finding import Finding
from stave.errors import FormatError
from stave.measure.steps import PHASES
from stave.report import doctor_data as sec
from stave.report.doctor_json import SCHEMA, doctor_json, doctor_json_errors, json_safe, validate_doctor_json


@pytest.fixture
def report(result: DoctorResult) -> dict:
    return doctor_json(result)


def test_report_validates_and_is_strict_json(report: dict, single_result, empty_result) -> None:
    for obj in (report, doctor_json(single_result), doctor_json(empty_result)):
        assert doctor_json_errors(obj) == []
        validate_doctor_json(obj)
        text = json.dumps(obj, allow_nan=False)  # raises on NaN/inf or a non-JSON type
        assert json.loads(text) == obj
    assert report["schema"] == SCHEMA


def test_breakdown_is_fractions_of_the_step_that_add_up(report: dict, result: DoctorResult) -> None:
    breakdown = report["summary"]["breakdown"]
    assert set(breakdown) == set(PHASES)
    assert math.isclose(sum(breakdown.values()), 1.0, rel_tol=1e-9)
    counted = [s for s in result.record.steps if s.counted]
    wait = sum(s.data_wait_ns for s in counted) / sum(s.duration_ns for s in counted)
    assert math.isclose(breakdown["data_wait"], wait)
    assert report["summary"]["step_time_s"]["median"] == pytest.approx(result.summary.step_time_median_s)


def test_steps_carry_every_step_with_phases_that_sum_to_the_step(report: dict, result: DoctorResult) -> None:
    steps = report["steps"]
    assert [s["index"] for s in steps] == [s.index for s in result.record.steps]
    assert [s["counted"] for s in steps] == [s.counted for s in result.record.steps]
    for s in steps:
        assert math.isclose(sum(s["phase_s"].values()), s["time_s"], rel_tol=1e-9)
    starts = [s["start_s"] for s in steps]
    assert starts == sorted(starts) and starts[0] >= 0


def test_absent_counters_are_null_not_zero(report: dict) -> None:
    util = report["summary"]["utilization"]
    assert util["psi_memory_some_pct"] is None
    assert util["gpu_util_pct"] is None
    assert util["swap_in_bytes_per_s"] == {"mean": 0.0, "min": 0.0, "max": 0.0}  # measured zero stays 0
    assert all(p["psi_io_some_pct"] is None for p in report["utilization"])
    worker1 = report["data_pipeline"]["workers"][1]
    assert worker1["opens"] is None and worker1["opens_per_sample"] is None
    assert report["summary"]["peak_cuda_bytes"] is None
    # One worker hides its I/O counters: the loader's total is unknown, not the other worker's count.
    io = report["data_pipeline"]["io"]
    assert io["opens_per_sample"] is None and io["bytes_per_read"] is None
    assert io["wall_per_sample_s"] > 0 and io["samples"] == 640


def test_one_rank_entry_per_process(report: dict, single_result) -> None:
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert report["ranks"][1]["step_time_s"]["median"] > report["ranks"][0]["step_time_s"]["median"]
    single = doctor_json(single_result)
    assert len(single["ranks"]) == 1
    assert single["ranks"][0]["status"] == "ok"
    assert single["ranks"][0]["breakdown"] == single["summary"]["breakdown"]


def test_nothing_counted_gives_nulls_not_zeros(empty_result) -> None:
    report = doctor_json(empty_result)
    summary = report["summary"]
    assert summary["steps"] == 0
    assert summary["step_time_s"]["median"] is None
    assert all(v is None for v in summary["breakdown"].values())
    assert report["run"]["script_exit_code"] == 1
    assert report["hot_lines"] == [] and report["utilization"] == []


def test_stage_shares_and_hot_lines(report: dict) -> None:
    stages = {s["name"]: s for s in report["data_pipeline"]["stages"]}
    assert list(stages) == ["load", "Resize", "ToTensor", "Normalize", "collate"]
    assert math.isclose(sum(s["share"] for s in stages.values()), 1.0)
    assert max(stages.values(), key=lambda s: s["share"])["name"] == "Resize"
    assert stages["Resize"]["wall_per_sample_s"] == pytest.approx(1.85e-3 * 1.01, rel=1e-3)
    hot = report["hot_lines"]
    assert hot[0]["phase"] == "data_wait"
    assert "for images, labels in loader" in hot[0]["code"]
    assert sum(h["share"] for h in hot) <= 1.0 + 1e-9
    assert [h["samples"] for h in hot] == sorted((h["samples"] for h in hot), reverse=True)


def test_findings_are_ranked_and_non_finite_evidence_becomes_null(result: DoctorResult) -> None:
    odd = Finding("MEMORY_GROWTH", "critical", 1.0, "RSS grows", {"growth_bytes_per_step": float("nan")}, "del x")
    result.findings.append(odd)
    report = doctor_json(result)
    ids = [f["id"] for f in report["findings"]]
    # A critical risk (est. 1.0) comes first: a run that crashes gains nothing from a speedup.
    assert ids == ["MEMORY_GROWTH", "DATA_CPU_BOUND", "STEP_OUTLIERS", "NO_MIXED_PRECISION"]
    growth = next(f for f in report["findings"] if f["id"] == "MEMORY_GROWTH")
    assert growth["evidence"]["growth_bytes_per_step"] is None
    assert growth["docs"] == "docs/findings/MEMORY_GROWTH.md"
    validate_doctor_json(report)


def test_json_safe_converts_numpy_and_tensor_scalars() -> None:
    import numpy as np
    import torch

    out = json_safe({"a": np.float32(1.5), "b": np.int64(3), "c": np.bool_(True), "d": torch.tensor(2.0),
                     "e": np.arange(3), "f": (1, float("inf")), 7: {"x"}})
    assert out == {"a": 1.5, "b": 3, "c": True, "d": 2.0, "e": [0, 1, 2], "f": [1, None], "7": ["x"]}
    json.dumps(out, allow_nan=False)


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda r: r.pop("findings"), "findings"),
        (lambda r: r.__setitem__("schema", "stave.doctor/2"), "schema"),
        (lambda r: r["summary"]["breakdown"].__setitem__("data_wait", 1.5), "breakdown"),
        (lambda r: r["summary"]["breakdown"].pop("other"), "breakdown"),
        (lambda r: r["findings"][0].__setitem__("severity", "fatal"), "severity"),
        (lambda r: r["findings"][0].__setitem__("est_speedup", 0.8), "est_speedup"),
        (lambda r: r["ranks"].clear(), "ranks"),
        (lambda r: r["steps"][0]["phase_s"].__setitem__("forward", -1.0), "steps"),
        (lambda r: r["run"].__setitem__("script_exit_code", "0"), "script_exit_code"),
    ],
)
def test_schema_rejects_broken_reports(report: dict, mutate, where: str) -> None:
    broken = copy.deepcopy(report)
    mutate(broken)
    errors = doctor_json_errors(broken)
    assert errors, f"a report with a broken {where} passed validation"
    with pytest.raises(FormatError, match="not a valid stave.doctor/1 report"):
        validate_doctor_json(broken)


def test_validation_without_jsonschema_checks_tag_and_keys(report: dict, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "jsonschema", None)  # import now raises ImportError
    assert doctor_json_errors(report) == []
    broken = {k: v for k, v in report.items() if k != "summary"}
    assert doctor_json_errors(broken) == ["$: missing required key 'summary'"]
    assert doctor_json_errors([]) == ["$: expected an object, got list"]


def test_long_utilization_series_are_averaged_not_cut(result: DoctorResult) -> None:
    record = result.record
    n = len(record.host)
    rows = sec.utilization_section(record, max_points=n // 4)
    assert len(rows) <= n // 4 + 1
    full = [h.cpu_main_pct for h in record.host]
    assert math.isclose(rows[0]["cpu_main_pct"], sum(full[:4]) / 4)
    assert all(r["psi_cpu_some_pct"] is None for r in rows)
    assert isinstance(rows[0]["rss_bytes"], int)
    assert rows[-1]["t_s"] > rows[0]["t_s"]


def test_stages_of_two_loaders_stay_apart(single_result) -> None:
    from stave.measure import StageStat, WorkerStats

    val = WorkerStats(worker_id=0, pid=5, loader_id=1, samples=10, batches=1, getitem_wall_ns=10_000_000,
                      getitem_cpu_ns=9_000_000, stages=[StageStat("collate", 10, 20_000, 20_000),
                                                        StageStat("load", 10, 9_000_000, 8_000_000)])
    single_result.record.workers.append(val)
    stages = doctor_json(single_result)["data_pipeline"]["stages"]
    assert [(s["loader_id"], s["name"]) for s in stages if s["loader_id"] == 1] == [(1, "load"), (1, "collate")]
    train_resize = next(s for s in stages if s["loader_id"] == 0 and s["name"] == "Resize")
    assert train_resize["samples"] == 640  # the validation loader's samples do not dilute training's
    assert math.isclose(sum(s["share"] for s in stages if s["loader_id"] == 1), 1.0)


def test_a_missing_rank_is_a_row_of_nulls(result: DoctorResult) -> None:
    from stave.analyze.breakdown import StepSummary
    from stave.doctor.result import RankSummary

    result.ranks.append(RankSummary(rank=2, hostname="", pid=0, status="missing", summary=StepSummary()))
    report = doctor_json(result)
    validate_doctor_json(report)
    missing = report["ranks"][2]
    assert missing["status"] == "missing" and missing["utilization"] is None
    assert missing["step_time_s"]["median"] is None and missing["samples_per_s"] is None
