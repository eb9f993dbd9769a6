"""The --verify orchestration, with the child runs replaced by scripted results: pairs, intervals,
the loss check's revert, a crashing fix, Ctrl-C, and findings that cannot be verified."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from stave.capture.runner import Target
from stave.diagnose.finding import Finding
from stave.doctor import verify as verify_mod
from stave.doctor.verify import VerifyEvents, VerifyOptions, verify
from stave.inject.launch import ChildResult, ChildRun

OPTIONS = VerifyOptions(top=3, pairs=3, steps=10, warmup=2)
LOSSES = [2.3, 2.2, 2.1, 2.0]


def _finding(finding_id: str, est: float, **evidence: Any) -> Finding:
    return Finding(finding_id, "warning", est, finding_id, evidence, "fix")


def _result(step_s: float, losses: list[float] = LOSSES, fixes: list[dict[str, Any]] | None = None,
            ok: bool = True, error: str | None = None) -> ChildResult:
    ends = [0.5 + step_s * i for i in range(10)]
    return ChildResult(exit_code=0 if ok else 1, stopped_by="steps" if ok else "error", error=error,
                       step_end_s=ends, samples=[8] * 10, losses=list(losses),
                       input_stats=[[0.0, 1.0], [0.1, 0.9]], fixes=fixes or [])


def _applied(ids: list[str]) -> list[dict[str, Any]]:
    return [{"id": i, "params": {}, "status": "applied", "reason": None, "hits": 1, "notes": []} for i in ids]


class _Fake:
    """Answers child runs by rule: baseline step time, per-fix behaviour; counts the runs."""

    def __init__(self, fixed: Callable[[ChildRun, int], ChildResult], baseline_s: float = 0.1) -> None:
        self.fixed = fixed
        self.baseline_s = baseline_s
        self.runs: list[ChildRun] = []

    def __call__(self, run: ChildRun, work_dir: Any, name: str = "run") -> ChildResult:
        self.runs.append(run)
        if run.perturb_bf16:
            return _result(self.baseline_s, [v * 1.0001 for v in LOSSES])
        if not run.selection.fixes:
            return _result(self.baseline_s)
        return self.fixed(run, sum(1 for r in self.runs if r.selection.fixes))


def _install(monkeypatch: pytest.MonkeyPatch, fake: _Fake) -> None:
    monkeypatch.setattr(verify_mod, "run_child", fake)


def test_measured_speedup_is_the_median_pair_ratio_with_its_interval(monkeypatch, tmp_path) -> None:
    times = {1: 0.05, 2: 0.04, 3: 0.05, 4: 0.08}  # by fixed-run count: warm-up, then three pairs
    fake = _Fake(lambda run, n: _result(times[n], fixes=_applied(["threads"])))
    _install(monkeypatch, fake)
    findings = [_finding("THREAD_OVERSUBSCRIPTION", 1.8, cores_usable=2,
                         model_inputs_changed={"compute_threads": [8, 2]})]
    out = verify(findings, Target("train.py"), OPTIONS, str(tmp_path))
    item = out.findings[0]
    assert item.status == "kept" and item.fixes == "threads(threads=2)"
    assert item.ratios == pytest.approx([2.5, 2.0, 1.25])
    assert item.measured_speedup == pytest.approx(2.0) and item.interval == pytest.approx((1.25, 2.5))
    assert item.loss["passed"] and item.loss["tolerance"] == pytest.approx(0.01)
    # warm-up pair + yardstick + 3 pairs, interleaved: A B (yardstick) A B A B A B
    kinds = ["P" if r.perturb_bf16 else ("B" if r.selection.fixes else "A") for r in fake.runs]
    assert kinds == ["A", "B", "P", "A", "B", "A", "B", "A", "B"]
    assert all(r.seed == OPTIONS.seed and r.steps == OPTIONS.steps for r in fake.runs)


def test_a_fix_that_changes_the_losses_is_reverted(monkeypatch, tmp_path) -> None:
    fake = _Fake(lambda run, n: _result(0.05, [2.3, 2.5, 2.9, 3.4], fixes=_applied(["threads"])))
    _install(monkeypatch, fake)
    out = verify([_finding("THREAD_OVERSUBSCRIPTION", 1.5, cores_usable=2)], Target("t.py"), OPTIONS, str(tmp_path))
    item = out.findings[0]
    assert item.status == "reverted" and "loss check failed" in item.reason and not item.ratios
    assert len(fake.runs) == 3  # no timing pairs for a reverted fix


def test_a_crashing_fix_is_reported_and_the_next_finding_tried(monkeypatch, tmp_path) -> None:
    def fixed(run: ChildRun, n: int) -> ChildResult:
        if run.selection.fixes[0].id == "threads":
            return _result(0.05, ok=False, error="RuntimeError: planted")
        return _result(0.05, fixes=_applied(["optimizer_impl"]))

    _install(monkeypatch, _Fake(fixed))
    findings = [_finding("THREAD_OVERSUBSCRIPTION", 1.9, cores_usable=2),
                _finding("OPTIMIZER_UNFUSED", 1.2, probe_fused_ratio=2.0)]
    out = verify(findings, Target("t.py"), OPTIONS, str(tmp_path))
    crashed, next_one = out.findings
    assert crashed.status == "crashed" and "RuntimeError: planted" in crashed.reason
    assert next_one.status == "kept" and next_one.measured_speedup == pytest.approx(2.0)


def test_fixes_that_change_nothing_or_do_not_apply_are_not_timed(monkeypatch, tmp_path) -> None:
    def fixed(run: ChildRun, n: int) -> ChildResult:
        status = "not_applicable" if run.selection.fixes[0].id == "autocast" else "no_effect"
        return _result(0.1, fixes=[{"id": run.selection.fixes[0].id, "status": status, "reason": "why not"}])

    _install(monkeypatch, _Fake(fixed))
    findings = [_finding("NO_MIXED_PRECISION", 1.9), _finding("DATA_WORKER_STARTUP", 1.3),
                _finding("MEMORY_GROWTH", 1.0)]
    out = verify(findings, Target("t.py"), OPTIONS, str(tmp_path))
    statuses = [(f.finding_id, f.status) for f in out.findings]
    assert statuses == [("NO_MIXED_PRECISION", "not_applicable"), ("DATA_WORKER_STARTUP", "no_effect"),
                        ("MEMORY_GROWTH", "not_verifiable")]
    assert "why not" in out.findings[0].reason and out.findings[2].reason


def test_a_failing_baseline_is_said_so(monkeypatch, tmp_path) -> None:
    fake = _Fake(lambda run, n: _result(0.05))
    fake.baseline_s = 0.1
    monkeypatch.setattr(verify_mod, "run_child",
                        lambda run, w, name="": _result(0.1, ok=False, error="exit code 3") if not run.selection.fixes
                        else fake(run, w, name))
    out = verify([_finding("NO_COMPILE", 1.4)], Target("t.py"), OPTIONS, str(tmp_path))
    assert out.findings[0].status == "baseline_failed" and "without any fix" in out.findings[0].reason


def test_ctrl_c_keeps_what_was_measured(monkeypatch, tmp_path) -> None:
    def fixed(run: ChildRun, n: int) -> ChildResult:
        if n == 4:  # during the third pair's fixed run
            raise KeyboardInterrupt
        return _result(0.05, fixes=_applied(["threads"]))

    _install(monkeypatch, _Fake(fixed))
    findings = [_finding("THREAD_OVERSUBSCRIPTION", 1.9, cores_usable=2), _finding("NO_COMPILE", 1.2)]
    events = _Recorder()
    out = verify(findings, Target("t.py"), OPTIONS, str(tmp_path), events)
    first, second = out.findings
    assert out.interrupted and first.status == "kept" and len(first.ratios) == 2 and "interrupted" in first.reason
    assert second.status == "interrupted" and not second.ratios
    assert events.done == ["THREAD_OVERSUBSCRIPTION"] and events.planned_runs == 2 * (2 + 2 * 3) + 1


class _Recorder(VerifyEvents):
    def __init__(self) -> None:
        self.done: list[str] = []
        self.planned_runs = 0

    def planned(self, total_runs: int) -> None:
        self.planned_runs = total_runs

    def finished(self, item: Any) -> None:
        self.done.append(item.finding_id)


def test_machine_findings_do_not_take_a_place_in_the_top(monkeypatch, tmp_path) -> None:
    _install(monkeypatch, _Fake(lambda run, n: _result(0.05, fixes=_applied(["threads"]))))
    findings = [_finding("MACHINE_BUSY", 1.5), _finding("THREAD_OVERSUBSCRIPTION", 1.3, cores_usable=2)]
    out = verify(findings, Target("t.py"), VerifyOptions(top=1, pairs=1, steps=10, warmup=2), str(tmp_path))
    # Its rank stays the doctor's (2nd in the report), though it is the first verified.
    assert [f.finding_id for f in out.findings] == ["THREAD_OVERSUBSCRIPTION"] and out.findings[0].rank == 2
    assert "MACHINE_BUSY" in out.notes[0]


def test_options_are_validated() -> None:
    with pytest.raises(ValueError, match="steps"):
        VerifyOptions(steps=4, warmup=3)
    with pytest.raises(ValueError, match="pairs"):
        VerifyOptions(pairs=0)
