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
    counted = M.step_flops(model, nn.CrossEntropyLoss(), x, y, "fp32")
    flops = counted.flops
    assert counted.uncounted_ops == ()
    # Forward 2*B*in*out per layer. Backward: every weight gradient, and the input gradient of
    # the second layer only (the batch itself needs none).
    first, second = 2 * 8 * 64 * 32, 2 * 8 * 32 * 16
    assert flops == (first + second) + first + 2 * second
    assert all(p.grad is None for p in model.parameters())  # the count leaves no gradients behind


class _Recurrent(nn.Module):
    def __init__(self, cell: type[nn.Module]) -> None:
        super().__init__()
        self.rnn, self.head = cell(16, 32, batch_first=True), nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0][:, -1])


def test_recurrent_kernels_without_a_formula_are_named_not_counted_as_zero() -> None:
    # On CPU the LSTM runs as one oneDNN kernel (mkldnn_rnn_layer) the counter has no formula for:
    # its FLOPs would be missing, so it is named. The GRU decomposes into counted matmuls.
    x, y = torch.randn(8, 10, 16), torch.randint(0, 4, (8,))
    head_flops = 2 * 8 * 32 * 4 * 2  # the head's forward and weight gradient
    lstm = M.step_flops(_Recurrent(nn.LSTM), nn.CrossEntropyLoss(), x, y, "fp32")
    assert lstm.uncounted_ops and all(any(f in op for f in M.DENSE_OP_FRAGMENTS) for op in lstm.uncounted_ops)
    gru = M.step_flops(_Recurrent(nn.GRU), nn.CrossEntropyLoss(), x, y, "fp32")
    # 10 time steps of 3 gates, input and hidden matmuls: far above the head alone.
    assert gru.uncounted_ops == () and gru.flops > 20 * head_flops


def test_a_counted_op_is_not_reported() -> None:
    from torch.utils.flop_counter import FlopCounterMode

    registry = FlopCounterMode(display=False).flop_registry
    assert M.uncounted_dense_ops({torch.ops.aten.mm}, registry) == ()
    assert M.uncounted_dense_ops({torch.ops.aten.relu}, registry) == ()  # no formula, but not dense
    assert M.uncounted_dense_ops({torch.ops.aten.mkldnn_rnn_layer}, registry) == ("aten.mkldnn_rnn_layer",)


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
