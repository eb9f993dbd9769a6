"""The achievable step time: every priced fix applied at once through the step model."""

from __future__ import annotations

import pytest

from stave.analyze.step_model import StepInputs, calibrated, estimate, without_phase_time
from stave.diagnose.finding import Finding
from stave.doctor.diagnosis import achievable_step_s


def _finding(fid: str, before: StepInputs, after: StepInputs, measured_s: float) -> Finding:
    est = estimate(before, after, measured_s)
    return Finding(id=fid, severity="warning", est_speedup=round(float(est), 3), title=fid, evidence={}, fix="x",
                   model_change=(est.before, est.after, est.measured_step_s))


BASE = calibrated(StepInputs(phases_s={"data_wait": 0.0, "forward": 0.04, "backward": 0.04, "optimizer": 0.01,
                                       "other": 0.01}, cores=2.0, compute_threads=2.0))


def test_two_fixes_of_different_phases_beat_either_and_machine_busy_is_left_out():
    measured = 0.1
    a = _finding("PYTHON_OVERHEAD", BASE, without_phase_time(BASE, {"other": 0.01}), measured)
    b = _finding("NO_MIXED_PRECISION", BASE, BASE.changed(phase_speed={"forward": 2.0, "backward": 2.0}), measured)
    busy = _finding("MACHINE_BUSY", BASE, without_phase_time(BASE, {"forward": 0.04}), measured)
    both = achievable_step_s([a, b], measured)
    assert both is not None and both < measured / max(a.est_speedup, b.est_speedup)
    # 0.01 s of Python gone and forward+backward halved: 0.1 - 0.01 - 0.04 = 0.05 s.
    assert both == pytest.approx(0.05, rel=0.02)
    assert achievable_step_s([a, b, busy], measured) == pytest.approx(both)


def test_the_same_saving_twice_is_not_counted_twice():
    measured = 0.1
    one = _finding("SYNC_IN_LOOP", BASE, without_phase_time(BASE, {"other": 0.01}), measured)
    same = _finding("PYTHON_OVERHEAD", BASE, without_phase_time(BASE, {"other": 0.01}), measured)
    assert achievable_step_s([one, same], measured) == pytest.approx(0.09, rel=0.02)


def test_none_without_a_priced_finding():
    plain = Finding(id="FORK_UNSAFE_HANDLE", severity="warning", est_speedup=1.0, title="t", evidence={}, fix="x")
    assert achievable_step_s([plain], 0.1) is None
    assert achievable_step_s([], 0.1) is None
