"""The loss check: its parts, its tolerance calibration, and that it fails on planted mistakes."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import tiny_job
from stave.bench.losscheck import (
    INPUT_STAT_TOL,
    LOSS_REL_TOL,
    LossCheck,
    LossChecker,
    channel_stats,
    relative_l2,
    stats_deviation,
)
from stave.bench.settings import RunConfig


def test_loss_check_arithmetic() -> None:
    check = LossCheck((2.0, 2.1, 2.2), (2.0, 2.0, 2.0), 0.01)
    assert check.deviations == pytest.approx([0.0, 0.05, 0.10])
    assert check.max_dev == pytest.approx(0.10) and check.worst_step == 2
    assert not check.passed and "loss off by 10.00% > 1.0% at step 2" in check.describe()
    nan = LossCheck((float("nan"),), (2.0,), 0.01)
    assert math.isinf(nan.max_dev) and not nan.passed and "not finite" in nan.describe()


def test_each_part_can_fail_on_its_own() -> None:
    ok = dict(losses=(2.0,), reference=(2.0,), tolerance=0.01)
    assert LossCheck(**ok, input_dev=0.0, output_dev=0.0, targets_match=True).passed
    assert not LossCheck(**ok, input_dev=0.5).passed
    assert not LossCheck(**ok, output_dev=0.5).passed
    assert LossCheck(**ok, output_dev=0.5, outputs_gated=False).passed  # custom loaders: stats only
    assert not LossCheck(**ok, targets_match=False).passed


def test_statistics_and_relative_l2() -> None:
    torch.manual_seed(0)
    x = torch.randn(16, 3, 8, 8)
    y = torch.randint(0, 3, (16,))
    ref = channel_stats([(x, y)])
    assert stats_deviation(channel_stats([(x * 1.0001, y)]), ref) < 0.01
    assert stats_deviation(channel_stats([(x * 0.25 + 0.5, y)]), ref) > INPUT_STAT_TOL
    assert channel_stats([(torch.zeros(4, 8, dtype=torch.long), y)]) is None  # token ids: not compared
    assert relative_l2(torch.ones(4), torch.ones(4)) == 0.0
    assert relative_l2(torch.ones(4) * 1.1, torch.ones(4)) == pytest.approx(0.1)
    assert relative_l2(torch.ones(3), torch.ones(4)) is None


@pytest.fixture(scope="module")
def checker_parts() -> tuple:
    torch.manual_seed(0)
    state = {k: v.clone() for k, v in tiny_job.model().state_dict().items()}
    return state, RunConfig(32)


def test_reference_against_itself_is_exact_and_bf16_passes(checker_parts: tuple) -> None:
    state, base = checker_parts
    checker = LossChecker(tiny_job.spec(batch_size=32), torch.device("cpu"), state, base, True)
    same = checker.check(base.with_changes(uint8=True))
    assert same.passed and same.max_dev < 1e-5 and same.targets_match
    bf16 = checker.check(base.with_changes(precision="bf16"))
    assert bf16.passed, bf16.describe()
    assert 0 < bf16.output_dev < 0.15
    assert checker.loss_tolerance(32, "shuffled") >= LOSS_REL_TOL


def test_dropped_normalization_fails_on_inputs_even_with_bf16(checker_parts: tuple) -> None:
    state, base = checker_parts
    checker = LossChecker(tiny_job.planted_spec(), torch.device("cpu"), state, base.with_changes(batch_size=64), True)
    for config in (
        base.with_changes(batch_size=64, uint8=True),
        base.with_changes(batch_size=64, uint8=True, precision="bf16"),
    ):
        check = checker.check(config)
        assert not check.passed
        assert check.input_dev > INPUT_STAT_TOL and "inputs changed" in check.describe()


def test_shifted_labels_fail_on_targets(checker_parts: tuple) -> None:
    state, base = checker_parts
    spec = tiny_job.spec(batch_size=32)
    shifted = tiny_job.TinyImages(uint8=True)
    shifted.labels = (shifted.labels + 1) % 10
    checker = LossChecker(dataclasses.replace(spec, uint8_dataset=shifted), torch.device("cpu"), state, base, True)
    check = checker.check(base.with_changes(uint8=True))
    assert check.targets_match is False and not check.passed
