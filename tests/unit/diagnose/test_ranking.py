"""The order of findings: the machine first, risks, then the estimated gain, where a fix that changes
what the run learns needs a lead larger than the model's accuracy to go first."""

from __future__ import annotations

from stave.diagnose.finding import CHANGES_LEARNING_RANK_MARGIN, Finding, rank_findings, severity_for_speedup


def finding(fid: str, est: float) -> Finding:
    return Finding(fid, severity_for_speedup(est), est, fid, {}, "")


def test_a_training_neutral_fix_of_similar_worth_goes_before_a_larger_batch():
    ranked = rank_findings([finding("SMALL_BATCH", 1.6), finding("OPTIMIZER_UNFUSED", 1.4)])
    assert [f.id for f in ranked] == ["OPTIMIZER_UNFUSED", "SMALL_BATCH"]
    # Its severity is still its own estimate's.
    assert ranked[1].severity == "critical"


def test_a_larger_batch_goes_first_when_its_lead_exceeds_the_models_accuracy():
    lead = 1.4 * CHANGES_LEARNING_RANK_MARGIN * 1.01
    ranked = rank_findings([finding("OPTIMIZER_UNFUSED", 1.4), finding("SMALL_BATCH", lead)])
    assert ranked[0].id == "SMALL_BATCH"
    # Other findings keep the plain order by estimate.
    ranked = rank_findings([finding("DATA_CPU_BOUND", 1.3), finding("PYTHON_OVERHEAD", 1.6)])
    assert ranked[0].id == "PYTHON_OVERHEAD"


def test_the_machine_and_risks_still_come_first():
    risk = Finding("FORK_UNSAFE_HANDLE", "critical", 1.0, "x", {}, "")
    ranked = rank_findings([finding("SMALL_BATCH", 20.0), risk, finding("MACHINE_BUSY", 1.0)])
    assert [f.id for f in ranked] == ["MACHINE_BUSY", "FORK_UNSAFE_HANDLE", "SMALL_BATCH"]
