"""The FLOP counter keeps the step's own matrix-product shapes (what the precision probe times)."""

from __future__ import annotations

import torch
from torch import nn

from stave.capture.op_counter import OpCounter


def test_linear_and_conv_shapes_are_counted_with_their_flops() -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.Linear(8 * 6 * 6, 5))
    x = torch.ones(2, 3, 8, 8)
    with OpCounter(lambda: "forward") as counter:
        model(x).sum().backward()
    dims = set(counter.gemm_flops)
    # The linear layer: 2 x 288 @ 288 x 5 (forward addmm).
    assert (1, 2, 5, 288) in dims
    # The conv as its im2col GEMM: 2 x 6 x 6 output positions, 8 channels, 3 x 3 x 3 receptive field.
    assert (1, 72, 8, 27) in dims
    top = counter.top_gemms(share=1.0, limit=10)
    assert top and all(len(row) == 5 and row[4] > 0 for row in top)
    assert [row[4] for row in top] == sorted((row[4] for row in top), reverse=True)
    assert sum(row[4] for row in top) <= sum(counter.flops.values())


def test_top_gemms_stops_at_the_flop_share() -> None:
    counter = OpCounter(lambda: "forward")
    counter.gemm_flops.update({(1, 64, 64, 64): 900, (1, 8, 8, 8): 90, (1, 2, 2, 2): 10})
    assert [row[:4] for row in counter.top_gemms(share=0.9, limit=10)] == [[1, 64, 64, 64]]
    assert len(counter.top_gemms(share=1.0, limit=2)) == 2


def test_batch_rows_are_the_samples_and_the_tokens() -> None:
    from stave.capture.session import batch_rows
    from stave.measure.config import TensorInfo

    def t(dtype: str, shape: list[int]) -> TensorInfo:
        return TensorInfo("batch", dtype, shape, "cpu", 0)

    assert batch_rows([t("float32", [2, 256]), t("int64", [2])]) == {2}
    assert batch_rows([t("int64", [8, 512])]) == {8, 4096}
    assert batch_rows([t("float32", [4, 100, 40])]) == {4, 400}
    assert batch_rows([t("uint8", [32, 3, 224, 224])]) == {32}  # images: rows are the samples
    assert batch_rows([t("float32", [])]) == set()
