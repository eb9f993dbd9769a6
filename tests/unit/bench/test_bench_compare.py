"""Interleaved comparison: the interval, the verdict and the ABBA order."""

from __future__ import annotations

import pytest

from stave.bench import compare as cmp
from stave.bench.compare import Comparison, TimingPlan, median_interval, verdict
from stave.bench.session import Window
from stave.errors import UsageError


def windows(rates: list[float]) -> tuple[Window, ...]:
    # 1 s windows: samples/s == samples.
    return tuple(
        Window(steps=1, samples=int(r), elapsed_ns=1_000_000_000, wait_ns=0, peak_mem_bytes=None) for r in rates
    )


def comparison(a: list[float], b: list[float]) -> Comparison:
    return Comparison(windows(a), windows(b))


def test_median_interval_uses_order_statistics() -> None:
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)  # 3 values: only (min, max) is possible
    values = [float(v) for v in range(1, 9)]
    assert median_interval(values) == (2.0, 7.0)  # 8 values at alpha 0.10: the 2nd from each end
    assert median_interval([]) == (0.0, 0.0)


def test_clear_gain_is_kept_and_noise_is_not() -> None:
    kept, why = verdict(comparison([100, 100, 100, 100], [130, 130, 128, 132]))
    assert kept and why.startswith("1.30x (1.28-1.32, 4 pairs)")
    kept, why = verdict(comparison([100, 100, 100, 100], [130, 90, 125, 101]))
    assert not kept and why.startswith("no clear gain")
    kept, why = verdict(comparison([100, 100, 100], [80, 85, 82]))
    assert not kept and why.startswith("slower")


def test_a_gain_below_min_gain_is_not_kept_even_without_noise() -> None:
    result = comparison([100, 100, 100, 100], [101, 101, 101, 101])
    assert result.noise == pytest.approx(0.0, abs=1e-6)
    assert result.decided(0.02) == "open"


def test_timing_plan_needs_three_windows() -> None:
    with pytest.raises(UsageError, match="at least 3 windows"):
        TimingPlan(pairs=2)
    with pytest.raises(UsageError, match="max_pairs"):
        TimingPlan(pairs=4, max_pairs=3)


class FakeSession:
    """Records the order windows are taken in and returns scripted rates."""

    def __init__(self, name: str, rates: list[float], log: list[str]) -> None:
        self.name, self.rates, self.log, self.steps_done = name, list(rates), log, 0

    def run_steps(self, count: int) -> None:
        self.steps_done += count

    def window(self, min_steps: int, min_s: float) -> Window:
        self.log.append(self.name)
        rate = self.rates.pop(0)
        return Window(1, int(rate), 1_000_000_000, 0, None)


def test_compare_interleaves_abba_and_extends_while_open() -> None:
    log: list[str] = []
    a = FakeSession("A", [100] * 8, log)
    b = FakeSession("B", [130, 95, 125, 140, 126, 131, 129, 133], log)
    result = cmp.compare(a, b, TimingPlan(warmup_steps=1, pairs=3, max_pairs=8, min_steps=1, min_s=0), min_gain=0.02)
    assert log[:6] == ["A", "B", "B", "A", "A", "B"]
    assert 3 < len(result.ratios) <= 8  # the first three pairs disagreed, so more were timed
    assert result.decided(0.02) == "faster"
