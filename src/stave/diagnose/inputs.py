"""Typed inputs of the doctor's rules."""

from __future__ import annotations

from dataclasses import dataclass

from stave.analyze.breakdown import StepSummary
from stave.measure.record import RunRecord


@dataclass(frozen=True)
class DoctorInput:
    """What a doctor rule sees: one process's measurements and their step summary."""

    record: RunRecord
    summary: StepSummary
