"""The fused-optimizer probe: a ratio for unfused optimizers with a fused kernel, nothing otherwise."""

from __future__ import annotations

import torch

from stave.measure.config import OptimizerInfo
from stave.monitor.optimizer_probe import fused_optimizer_ratio


def test_probe_measures_a_ratio_without_touching_global_rng():
    state = torch.random.get_rng_state()
    ratio = fused_optimizer_ratio(OptimizerInfo("AdamW", 20_000, 20, foreach=None, fused=None), "cpu")
    assert ratio is not None and ratio > 0
    assert torch.equal(state, torch.random.get_rng_state())


def test_probe_skips_fused_and_unknown_optimizers():
    assert fused_optimizer_ratio(OptimizerInfo("AdamW", 100, 2, fused=True), "cpu") is None
    assert fused_optimizer_ratio(OptimizerInfo("LBFGS", 100, 2), "cpu") is None
