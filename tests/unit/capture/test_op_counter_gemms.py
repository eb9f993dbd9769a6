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


def test_cpu_op_times_are_bucketed_by_what_autocast_would_run_in_bf16() -> None:
    from stave.measure.config import FULL_PRECISION, LOW_PRECISION, PRODUCT

    # A conv block: its ReLU and pooling take the conv's (bf16 under autocast) output, so they would
    # run in bf16; the fp32 input's own normalization, before any product, stays fp32.
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(8 * 8 * 8, 5))
    x = torch.rand(4, 3, 16, 16)
    phase = ["forward"]
    with OpCounter(lambda: phase[0]) as counter:
        y = model((x - 0.5) * 2.0)
        loss = nn.functional.cross_entropy(y, torch.zeros(4, dtype=torch.long))
        phase[0] = "backward"
        loss.backward()
    times = counter.op_s_by_phase()
    for p in ("forward", "backward"):
        assert times[p].get(PRODUCT, 0.0) > 0
        assert times[p].get(LOW_PRECISION, 0.0) > 0
    assert times["forward"].get(FULL_PRECISION, 0.0) > 0  # the input's scaling and the loss


def test_a_residual_add_of_an_fp32_stream_stays_fp32() -> None:
    from stave.measure.config import LOW_PRECISION

    counter = OpCounter(lambda: "forward")
    lin = nn.Linear(16, 16)
    x = torch.rand(8, 16)
    with counter:
        h = lin(x)              # a product: bf16 under autocast
        a = torch.relu(h)       # its activation: bf16 inputs only
    low_after_activation = counter.op_s_by_phase()["forward"].get(LOW_PRECISION, 0.0)
    with counter:
        _ = x + a               # fp32 + bf16 promotes to fp32
    assert counter.op_s_by_phase()["forward"].get(LOW_PRECISION, 0.0) == low_after_activation
    assert counter._would_be_low(a) and not counter._would_be_low(x)


def test_attention_time_counts_its_kernels_and_the_ops_on_its_square_scores() -> None:
    # Attention computed op by op (eager, or SDPA's math path): the score matmul, the mask, softmax
    # and the value matmul are attention's; the projections before it are not.
    q_proj = nn.Linear(64, 64)
    x = torch.rand(2, 32, 64)
    mask = torch.zeros(2, 1, 32, 32)
    phase = ["forward"]
    with OpCounter(lambda: phase[0]) as counter:
        q = q_proj(x).view(2, 32, 4, 16).transpose(1, 2)
        scores = (q @ q.transpose(-1, -2)) / 4.0 + mask
        out = torch.softmax(scores, dim=-1) @ q
        out.sum().backward()
    assert counter.attention_ns["forward"] > 0
    total = sum(ns for (p, _), ns in counter.op_ns.items() if p == "forward")
    assert counter.attention_ns["forward"] < total  # the projection is not attention's
    from stave.capture.op_counter import _is_attention_shaped

    assert _is_attention_shaped(torch.zeros(2, 4, 32, 32))
    assert not _is_attention_shaped(torch.zeros(2, 32, 64))
    assert not _is_attention_shaped(torch.zeros(2, 4, 8, 8))  # below ATTENTION_MIN_ROWS


def test_ops_that_run_on_one_thread_are_timed_apart() -> None:
    # Dropout's mask (a random-number kernel) and ops under ATen's parallel grain run on the calling
    # thread whatever the pool; a large elementwise op and the matrix product do not.
    big = torch.rand(512, 1024)
    small = torch.rand(64, 64)
    w = torch.rand(1024, 1024)
    phase = ["forward"]
    with OpCounter(lambda: phase[0]) as counter:
        torch.nn.functional.dropout(big, 0.1, training=True)
        phase[0] = "backward"
        small.mul(2.0)
        big.mul(2.0)
        big @ w
    assert counter.serial_ops["forward"] >= 1 and counter.serial_ns["forward"] > 0
    # In backward only the small multiply is serial: the large one and the product are not.
    assert counter.serial_ops["backward"] == 1
    # In backward the large multiply is the one op over the grain that is not a product.
    assert counter.large_ops["backward"] == 1
    assert counter.serial_ns["backward"] < sum(ns for (p, _), ns in counter.op_ns.items() if p == "backward")


def test_tensor_leaves_finds_every_tensor_in_nested_arguments_in_order():
    from stave.capture.op_counter import tensor_leaves

    a, b, c = torch.ones(1), torch.ones(2), torch.ones(3)
    assert tensor_leaves(a) == [a]
    found = tensor_leaves(((a, [b, 2.0, None]), {"w": c, "n": 3}))
    assert len(found) == 3 and all(x is y for x, y in zip(found, (a, b, c)))
    assert tensor_leaves((1, "x", None)) == []
