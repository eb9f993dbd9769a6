"""FLOPs from the flop counter, the MFU arithmetic, and the batch-size memory cap."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from stave.bench import mfu as M
from stave.bench.memory import RAM_SHARE_FOR_BATCH, SAVED_TO_PEAK_FACTOR, cpu_batch_cap, saved_activation_bytes


def test_step_flops_count_forward_and_backward_matmuls() -> None:
    model = nn.Sequential(nn.Linear(64, 32, bias=False), nn.Linear(32, 16, bias=False))
    x, y = torch.randn(8, 64), torch.randint(0, 16, (8,))
    flops = M.step_flops(model, nn.CrossEntropyLoss(), x, y, "fp32")
    # Forward 2*B*in*out per layer. Backward: every weight gradient, and the input gradient of
    # the second layer only (the batch itself needs none).
    first, second = 2 * 8 * 64 * 32, 2 * 8 * 32 * 16
    assert flops == (first + second) + first + 2 * second
    assert all(p.grad is None for p in model.parameters())  # the count leaves no gradients behind


def test_mfu_arithmetic_and_unknowns() -> None:
    peak = M.Peak(1e12, "bf16", "test")
    assert M.mfu(1e9, 250.0, peak) == pytest.approx(0.25)
    assert M.mfu(None, 250.0, peak) is None
    assert M.mfu(1e9, 250.0, M.Peak(None, "bf16", "unknown GPU")) is None


def test_cpu_peak_is_a_measured_positive_rate() -> None:
    M.cpu_peak_flops.cache_clear()
    peak = M.peak_flops(torch.device("cpu"), "fp32")
    assert peak.flops_per_s is not None and peak.flops_per_s > 1e8 and peak.dtype == "fp32"


def test_saved_activations_grow_with_the_batch() -> None:
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    small = saved_activation_bytes(model, nn.CrossEntropyLoss(), torch.randn(8, 32), torch.randint(0, 10, (8,)), "fp32")
    large = saved_activation_bytes(
        model, nn.CrossEntropyLoss(), torch.randn(64, 32), torch.randint(0, 10, (64,)), "fp32"
    )
    assert small > 0 and large > 4 * small


def test_cpu_batch_cap_uses_half_the_available_ram() -> None:
    per_sample = 1_000_000
    cap = cpu_batch_cap(per_sample, available_bytes=8_000_000_000)
    assert cap == int(8_000_000_000 * RAM_SHARE_FOR_BATCH / (per_sample * SAVED_TO_PEAK_FACTOR))
    assert cpu_batch_cap(0, available_bytes=1) > 1 << 20
