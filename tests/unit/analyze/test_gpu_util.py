"""The GPU's utilization over the counted steps: only NVML readings whose period lies inside them.

The records are real: the doctor's runs of tests/planted/gpu_*.py on a lent H200 (session 22,
torch 2.11), kept by ``benchmarks/scenarios.py --records``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from stave.analyze.gpu_util import NVML_MAX_PERIOD_S, gpu_util_window, period_bound_s
from stave.analyze.host import summarize_host
from stave.measure.record import RunRecord

H200 = Path(__file__).resolve().parents[2] / "data" / "records" / "h200"


def h200_record(name: str) -> RunRecord:
    with gzip.open(H200 / f"{name}.rec.json.gz", "rt", encoding="utf-8") as f:
        return RunRecord.from_dict(json.load(f), where=name)


def test_the_period_is_bounded_by_how_often_the_reading_changes():
    # Read every 0.1 s; the value changes every 0.2 s: the period is under 0.2 + 0.1 s.
    times = [i * 0.1 for i in range(12)]
    values = [float(10 * (i // 2)) for i in range(12)]
    assert period_bound_s(times, values) == pytest.approx(0.3)
    # A value that never changes (or changes once) bounds nothing: NVML's documented maximum.
    assert period_bound_s(times, [5.0] * 12) == NVML_MAX_PERIOD_S
    assert period_bound_s(times, [0.0] * 6 + [50.0] * 6) == NVML_MAX_PERIOD_S
    assert period_bound_s([0.0, 0.1], [0.0, 9.0]) == NVML_MAX_PERIOD_S


def test_a_run_shorter_than_the_period_has_no_utilization():
    # 35 counted steps of a bf16 MLP that kept the GPU busy, 0.1 s in all: the one reading taken
    # during them (0 %) described the time before them. Taken as the steps' utilization, NO_COMPILE
    # priced "the GPU 100 % idle" at 1.14x on a healthy loop.
    rec = h200_record("gpu_healthy-b8192-w4096")
    inside = [h for h in rec.host if h.step in {s.index for s in rec.counted_steps()} and h.gpu_util_pct is not None]
    assert [h.gpu_util_pct for h in inside] == [0.0]
    window = gpu_util_window(rec)
    assert window is not None and window.window_s < window.period_s
    assert window.util_pct is None and window.readings == 0
    assert summarize_host(rec).gpu_util_pct is None


def test_readings_a_period_into_the_steps_are_kept():
    # ResNet-50 in bf16: 25 counted steps over 0.75 s; the readings change every 0.2 s, so those
    # taken 0.3 s or more after the first counted step describe the steps (47-48 %), the earlier
    # ones (7 %, 27 %) the warm-up.
    rec = h200_record("gpu_cudnn_benchmark_off-resnet50-b256-96px")
    window = gpu_util_window(rec)
    assert window is not None
    assert window.period_s == pytest.approx(0.3, abs=0.02)
    assert window.readings >= 3
    assert 40.0 <= window.util_pct <= 50.0
    assert summarize_host(rec).gpu_util_pct == window.util_pct
