"""The finding -> injectable fix table: parameters come from the finding's own evidence."""

from __future__ import annotations

from typing import Any

import pytest

from stave.diagnose.finding import Finding
from stave.doctor.fix_map import FIX_MAP, NOT_VERIFIABLE, plan_for
from stave.inject.registry import get_unit


def _finding(finding_id: str, **evidence: Any) -> Finding:
    return Finding(finding_id, "warning", 1.3, f"{finding_id} title", evidence, "fix")


def test_every_mapped_fix_is_a_registered_unit() -> None:
    evidence = {"suggested_workers": 2, "model_inputs_changed": {"compute_threads": [8, 2], "workers": [0, 1]},
                "cores_usable": 2, "batch_growth": 2, "samples_per_step": 32, "micro_batches_per_step": 1}
    for finding_id in FIX_MAP:
        plan = plan_for(_finding(finding_id, **evidence), allow_learning_changes=True)
        assert plan.injectable, finding_id
        assert all(get_unit(r.id) is not None for r in plan.requests)


def test_data_cpu_bound_takes_the_workers_it_names() -> None:
    plan = plan_for(_finding("DATA_CPU_BOUND", suggested_workers=3))
    assert [r.label() for r in plan.requests] == ["num_workers(num_workers=3)", "persistent_workers"]
    per_item = plan_for(_finding("DATA_CPU_BOUND", per_item_max_s=1e-5))
    assert [r.id for r in per_item.requests] == ["batched_fetch"]
    stages = plan_for(_finding("DATA_CPU_BOUND", top_stage="Resize"))
    assert not stages.injectable and stages.reason.startswith(NOT_VERIFIABLE)


def test_thread_findings_take_the_split_they_name() -> None:
    over = plan_for(_finding("THREAD_OVERSUBSCRIPTION", cores_usable=4,
                             model_inputs_changed={"compute_threads": [16, 4]}))
    assert over.label() == "threads(threads=4)"
    split = plan_for(_finding("CPU_CONTENTION", model_inputs_changed={"workers": [6, 2]}))
    assert split.label() == "num_workers(num_workers=2)"
    transform = plan_for(_finding("CPU_CONTENTION", model_inputs_changed={"load_cpu_s": [0.2, 0.1]}))
    assert not transform.injectable and "batch-level transform" in transform.reason


def test_optimizer_picks_fused_only_where_the_probe_measured_it() -> None:
    assert plan_for(_finding("OPTIMIZER_UNFUSED", probe_fused_ratio=2.0)).label() == "optimizer_impl(impl=fused)"
    assert plan_for(_finding("OPTIMIZER_UNFUSED", probe_fused_ratio=None)).label() == "optimizer_impl(impl=foreach)"


def test_small_batch_needs_the_explicit_flag() -> None:
    finding = _finding("SMALL_BATCH", batch_growth=4, samples_per_step=16, micro_batches_per_step=1)
    refused = plan_for(finding)
    assert not refused.injectable and refused.changes_learning and "--allow-learning-changes" in refused.reason
    allowed = plan_for(finding, allow_learning_changes=True)
    assert allowed.label() == "batch_size(batch_size=64, scale_lr=True)"
    assert allowed.statistic == "samples_per_s" and allowed.changes_learning


@pytest.mark.parametrize("finding_id", ["MEMORY_GROWTH", "EVAL_OVERHEAD", "PADDING_WASTE", "MACHINE_BUSY"])
def test_findings_without_an_injectable_fix(finding_id: str) -> None:
    plan = plan_for(_finding(finding_id))
    assert not plan.injectable and plan.reason


def test_bad_evidence_is_not_verifiable_rather_than_an_error() -> None:
    plan = plan_for(_finding("THREAD_OVERSUBSCRIPTION", model_inputs_changed={"compute_threads": [8, 0]},
                             cores_usable=0))
    assert not plan.injectable
