"""Fixtures of the report tests: the synthetic results of :mod:`report_factory`."""

from __future__ import annotations

import dataclasses

import pytest
from report_factory import SCRIPT, make_result

from stave.analyze.breakdown import summarize_steps
from stave.doctor.result import DoctorResult
from stave.measure import RunInfo, RunRecord



@pytest.fixture
def result() -> DoctorResult:
    """The two-rank synthetic result."""
    return make_result()


@pytest.fixture
def single_result() -> DoctorResult:
    """A single-process result (no rank list, as the doctor builds for one process)."""
    return make_result(ranks=1)


@pytest.fixture
def empty_result() -> DoctorResult:
    """A script that ended before its first optimizer step: nothing counted, nothing sampled."""
    record = RunRecord(run=RunInfo(script=SCRIPT, script_exit_code=1, stopped_by="error",
                                   error="ValueError: bad shape", hostname="trainbox", pid=1))
    return DoctorResult(record=record, summary=summarize_steps([]), findings=[],
                        notes=["the script made no optimizer step"])


@pytest.fixture
def hostile_result() -> DoctorResult:
    """User strings that would inject markup if not escaped."""
    res = make_result(ranks=1, script="/tmp/<script>alert('x')</script>&.py")
    bad = dataclasses.replace(
        res.findings[0], title="<img src=x onerror=alert(1)> slow", fix="x = '</pre><script>bad()</script>'"
    )
    return dataclasses.replace(res, findings=[bad, *res.findings[1:]])
