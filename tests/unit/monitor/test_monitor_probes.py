"""The post-run probes: they measure, stay within budget, and leave the user's state alone."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import random
import time

import numpy as np
import pytest
import torch

from stave import device as dev
from stave.monitor import probes
from stave.monitor.probes import run_probes


def _global_rng_states() -> tuple:
    return torch.get_rng_state(), np.random.get_state(), random.getstate()


def _assert_same_rng(before: tuple, after: tuple) -> None:
    assert torch.equal(before[0], after[0])
    assert before[1][0] == after[1][0] and np.array_equal(before[1][1], after[1][1]) and before[1][2:] == after[1][2:]
    assert before[2] == after[2]


def test_probes_measure_and_leave_threads_and_generators_alone() -> None:
    # The bf16 probe runs where the CPU has native bf16. Elsewhere bf16 is emulated through fp32
    # (a 256^3 bf16 GEMM takes ~50x the fp32 one on an AVX2-only CPU): the probe must not run and
    # cannot fit its budget, so there it is checked to stay out.
    native = dev.cpu_has_native_bf16()
    torch.manual_seed(1234)
    np.random.seed(1234)
    random.seed(1234)
    threads = torch.get_num_threads()
    before = _global_rng_states()
    start = time.perf_counter()
    result = run_probes(threads, "cpu", budget_s=0.8)
    elapsed = time.perf_counter() - start
    _assert_same_rng(before, _global_rng_states())
    assert torch.get_num_threads() == threads
    assert torch.is_grad_enabled()
    assert result.op_overhead_ns is not None and 10 < result.op_overhead_ns < 1e6
    if native:
        assert result.bf16_speedup is not None and result.bf16_speedup > 0
        assert result.bf16_probe_shape and result.bf16_probe_shape[0] in probes.CPU_MATMUL_SIZES
        # Any CPU that runs torch does between 1e8 and 1e14 fp32 FLOP/s.
        assert result.fp32_matmul_flops_per_s is not None and 1e8 < result.fp32_matmul_flops_per_s < 1e14
    else:
        assert result.bf16_speedup is None and result.bf16_probe_shape == []
    assert result.threads_speedup is None and result.threads_probe == []  # not oversubscribed
    assert elapsed < 0.8 + 1.0  # the budget, plus the warm-up calls a probe may overrun by


def test_no_bf16_probe_without_native_bf16_and_thread_probe_when_oversubscribed(monkeypatch) -> None:
    monkeypatch.setattr(dev, "cpu_has_native_bf16", lambda: False)
    cores = dev.usable_cores()
    saved = torch.get_num_threads()
    torch.set_num_threads(1)  # a setting the probe must put back, whatever it was
    try:
        before = _global_rng_states()
        result = run_probes(cores + 2, "cpu", budget_s=1.0)
        assert torch.get_num_threads() == 1
        _assert_same_rng(before, _global_rng_states())
    finally:
        torch.set_num_threads(saved)
    assert result.bf16_speedup is None and result.bf16_probe_shape == [] and result.fp32_matmul_flops_per_s is None
    assert result.threads_probe == [cores + 2, cores]
    assert result.threads_speedup is not None and result.threads_speedup > 0
    assert result.op_overhead_ns is not None


def test_a_probe_that_cannot_fit_its_budget_is_left_out() -> None:
    slow_calls = []

    def slow() -> None:
        slow_calls.append(1)
        time.sleep(0.05)

    deadline = time.perf_counter() + 0.1  # MIN_PAIRS pairs of 0.05 s calls cannot fit
    assert probes._interleaved_ratio((1,), lambda size: (slow, slow), torch.device("cpu"), deadline) is None
    assert len(slow_calls) == 4  # only the start-up and the per-call warm-up ran


def test_interleaved_ratio_measures_the_ratio() -> None:
    def fast() -> None:
        time.sleep(0.002)

    def slow() -> None:
        time.sleep(0.006)

    result = probes._interleaved_ratio((1,), lambda size: (slow, fast), torch.device("cpu"), time.perf_counter() + 0.6)
    assert result is not None and result.size == 1 and 1.5 < result.ratio < 4.5
    assert 0.005 < result.a_s < 0.05 and result.b_s < result.a_s


def test_a_slow_machine_falls_back_to_a_smaller_problem() -> None:
    built = []

    def make(size: int) -> probes.Pair:
        built.append(size)
        cost_s = 0.04 * (size / 4) ** 3  # 40 ms at size 4, 5 ms at size 2

        def side() -> None:
            time.sleep(cost_s)

        return side, side

    result = probes._interleaved_ratio((4, 2), make, torch.device("cpu"), time.perf_counter() + 0.25)
    assert built == [4, 2]
    assert result is not None and result.size == 2 and 0.5 < result.ratio < 2.0


def test_budget_must_be_positive() -> None:
    with pytest.raises(ValueError):
        run_probes(1, "cpu", budget_s=0)


@pytest.mark.cuda
def test_probes_on_the_gpu_keep_the_cuda_generator() -> None:
    state = torch.cuda.get_rng_state()
    result = run_probes(torch.get_num_threads(), "cuda", budget_s=1.5)
    assert torch.equal(state, torch.cuda.get_rng_state())
    assert result.bf16_speedup is not None and result.bf16_probe_shape == [probes.GPU_MATMUL_SIZE] * 3
    assert result.op_overhead_ns is not None


def test_bf16_probe_times_the_steps_own_gemm_shapes(monkeypatch) -> None:
    monkeypatch.setattr(dev, "cpu_has_native_bf16", lambda: True)
    # Two small shapes of a step: a linear layer's GEMM and a batched attention product.
    shapes = [[1, 64, 32, 48, 2 * 64 * 32 * 48 * 10], [4, 16, 16, 8, 2 * 4 * 16 * 16 * 8 * 3]]
    result = run_probes(torch.get_num_threads(), "cpu", budget_s=1.0, gemm_shapes=shapes)
    assert result.bf16_probe_source == "own_shapes"
    assert result.bf16_probe_shapes and all(s in shapes for s in result.bf16_probe_shapes)
    assert result.bf16_speedup is not None and result.bf16_speedup > 0
    assert result.fp32_matmul_flops_per_s is not None and result.fp32_matmul_flops_per_s > 0
    assert isinstance(result.bf16_probe_disturbed, bool)


def test_without_native_bf16_the_own_shapes_still_give_the_fp32_rate(monkeypatch) -> None:
    # No bf16 question on this CPU, but the step's GEMM shapes are known: their fp32 rate is measured
    # (SMALL_BATCH's op-bound test reads it) and no bf16 figure is made up.
    monkeypatch.setattr(dev, "cpu_has_native_bf16", lambda: False)
    shapes = [[1, 64, 32, 48, 2 * 64 * 32 * 48 * 10]]
    result = run_probes(torch.get_num_threads(), "cpu", budget_s=1.0, gemm_shapes=shapes)
    assert result.fp32_matmul_flops_per_s is not None and result.fp32_matmul_flops_per_s > 0
    assert result.bf16_speedup is None and result.bf16_probe_source == "generic"


def test_a_disturbed_shape_is_repeated_then_marked(monkeypatch) -> None:
    calls: list[float] = []

    def spread_result(sizes, make, device, deadline, setup_a=None, setup_b=None):
        calls.append(deadline)
        return probes.RatioResult(ratio=1.5, size=1, a_s=3e-3, b_s=2e-3, spread=probes.PROBE_SPREAD_MAX * 2)

    monkeypatch.setattr(probes, "_interleaved_ratio", spread_result)
    gen = torch.Generator().manual_seed(0)
    work = probes.own_products([[1, 8, 8, 8, 1024]], [], torch.device("cpu"), gen)
    out = probes._own_shapes_probe(work, torch.device("cpu"), time.perf_counter() + 0.5)
    assert len(calls) == 2  # timed, disturbed, timed again
    assert out is not None and out.disturbed and out.ratio == pytest.approx(1.5)


def test_a_training_sized_gemm_is_timed_on_fewer_rows_and_counted_back() -> None:
    # A conv layer's im2col GEMM at batch 32, 96x96: 21.7 GFLOP a call, too much for one probe call.
    dims = [1, 294912, 64, 576, 3 * 2 * 294912 * 64 * 576]
    work = probes._gemm_work(dims, torch.device("cpu"), torch.Generator().manual_seed(0))
    assert work is not None
    a = work.make(torch.float32)
    out = a()
    probe_flops = 2.0 * out.shape[0] * out.shape[1] * 576
    assert probe_flops <= probes.PROBE_CALL_FLOPS_MAX and out.shape[1] == 64  # the rows were cut, not the columns
    # count x one probe call's FLOPs = the step's FLOPs of that shape.
    assert work.count * probe_flops == pytest.approx(dims[4], rel=1e-3)


def test_a_convolution_is_timed_as_a_convolution_on_fewer_samples() -> None:
    from torch import nn

    from stave.capture.op_counter import OpCounter

    conv = nn.Conv2d(8, 16, 3, padding=1)
    x = torch.randn(4, 8, 32, 32)
    with OpCounter(lambda: "forward") as counter:
        conv(x).sum().backward()
    shapes = counter.top_convs(share=1.0, limit=4)
    assert {s.backward for s in shapes} == {False, True}
    forward = next(s for s in shapes if not s.backward)
    assert forward.input_shape == [4, 8, 32, 32] and forward.weight_shape == [16, 8, 3, 3]
    assert forward.padding == [1, 1] and forward.flops_per_call == forward.flops_per_step > 0
    for shape in shapes:
        work = probes._conv_work(shape, torch.device("cpu"), torch.Generator().manual_seed(0))
        assert work is not None and work.count == pytest.approx(1.0)  # 4 samples fit one call
        for dtype in (torch.float32, torch.bfloat16):
            result = work.make(dtype)()
            outputs = [t for t in (result if isinstance(result, tuple) else (result,)) if t is not None]
            assert outputs and all(t.dtype == dtype for t in outputs)
    # A convolution too large for one call keeps fewer samples and counts the rest back.
    big = dataclasses.replace(forward, input_shape=[4096, 8, 32, 32], flops_per_call=forward.flops_per_call * 1024,
                              flops_per_step=forward.flops_per_call * 1024)
    work = probes._conv_work(big, torch.device("cpu"), torch.Generator().manual_seed(0))
    assert work is not None and work.count > 1.0
    assert work.count * forward.flops_per_call / 4 * (4096 / work.count) == pytest.approx(big.flops_per_step, rel=1e-6)


def test_a_step_already_in_bf16_gets_its_rate_in_bf16_and_no_bf16_question(monkeypatch) -> None:
    monkeypatch.setattr(dev, "cpu_has_native_bf16", lambda: True)
    seen: list[torch.dtype] = []
    real_gemm = probes._gemm

    def spy(dims, dtype, device, gen):
        seen.append(dtype)
        return real_gemm(dims, dtype, device, gen)

    monkeypatch.setattr(probes, "_gemm", spy)
    shapes = [[1, 64, 32, 48, 2 * 64 * 32 * 48 * 10]]
    result = run_probes(torch.get_num_threads(), "cpu", budget_s=1.0, gemm_shapes=shapes, gemm_dtype="bfloat16")
    assert result.bf16_speedup is None
    assert result.matmul_flops_per_s is not None and result.fp32_matmul_flops_per_s is None
    assert seen and set(seen) == {torch.bfloat16}


def test_neighbour_probe_times_a_busy_neighbour_and_leaves_no_process() -> None:
    # One busy process beside a matmul that uses every usable core must slow it (ratio > 1; by how
    # much depends on the machine), and the spinning child is gone afterwards.
    import psutil

    cores = dev.usable_cores()
    before_children = {p.pid for p in psutil.Process().children()}
    result = run_probes(cores, "cpu", budget_s=1.5)
    assert result.neighbour_probe == [cores, cores]
    assert result.neighbour_stretch is not None and result.neighbour_stretch > 1.0
    # No shapes of the step's own: one square matmul stood in.
    assert result.neighbour_probe_source == "square"
    assert {p.pid for p in psutil.Process().children()} <= before_children


def test_neighbour_probe_times_the_steps_own_products() -> None:
    # With the step's products given, the neighbour probe times those (a call's stretch beside a
    # busy process depends on its size), and the spinning child is gone afterwards.
    import psutil

    cores = dev.usable_cores()
    before_children = {p.pid for p in psutil.Process().children()}
    shapes = [[1, 256, 512, 512, 2 * 256 * 512 * 512 * 4]]
    result = run_probes(cores, "cpu", budget_s=3.0, gemm_shapes=shapes)
    assert result.neighbour_probe_source == "own_shapes"
    assert result.neighbour_stretch is not None and result.neighbour_stretch > 1.0
    assert {p.pid for p in psutil.Process().children()} <= before_children


def test_fixed_share_of_a_call_from_its_time_at_two_batch_sizes() -> None:
    g = probes.BATCH_SCALE_GROWTH
    # The same time at g times the rows: all of it is per call.
    assert probes.fixed_share_of_call(1.0, g) == pytest.approx(1.0)
    # g times the time: all of it is per row.
    assert probes.fixed_share_of_call(1.0 / g, g) == pytest.approx(0.0)
    # t(g) = a + b g with a = b: t(1) = 2b, t(g) = (1 + g) b.
    assert probes.fixed_share_of_call(2.0 / (1 + g), g) == pytest.approx(0.5)
    # Noise past either end is clipped, never a negative or over-full share.
    assert probes.fixed_share_of_call(0.5 / g, g) == 0.0 and probes.fixed_share_of_call(1.3, g) == 1.0


def test_the_batch_dimension_is_the_one_equal_to_the_batch() -> None:
    # A linear layer's forward GEMM has the batch as its rows (m); its weight gradient has it as k.
    assert probes.batch_dim([1, 2, 256, 256], {2}) == 1
    assert probes.batch_dim([1, 256, 256, 2], {2}) == 3
    # Token rows (batch x sequence) of a sequence model; a dimension of 1 is never the batch.
    assert probes.batch_dim([1, 4096, 384, 128], {8, 4096}) == 1
    assert probes.batch_dim([1, 1, 64, 64], {1}) is None
    assert probes.batch_dim([1, 64, 64, 64], {32}) is None


def test_batch_scale_probe_weights_the_steps_shapes(monkeypatch) -> None:
    seen: list[tuple[int, ...]] = []

    def fake(sizes, make, device, deadline, setup_a=None, setup_b=None, work_exponent=3.0, smallest_first=False):
        small, large = make(1)
        seen.append(tuple(large().shape))
        # The batch-2 shape keeps its time at 8x the rows (per-call); the other has no batch dim.
        return probes.RatioResult(ratio=1.0, size=1, a_s=1e-3, b_s=1e-3, spread=0.0)

    monkeypatch.setattr(probes, "_interleaved_ratio", fake)
    gen = torch.Generator().manual_seed(0)
    shapes = [[1, 2, 16, 16, 2 * 2 * 16 * 16 * 3], [1, 16, 16, 16, 2 * 16 * 16 * 16 * 1]]
    out = probes._batch_scale_probe(shapes, {2}, torch.device("cpu"), gen, time.perf_counter() + 0.5)
    assert seen[0] == (2 * probes.BATCH_SCALE_GROWTH, 16) and seen[1] == (16, 16)
    # 3 calls of the per-call shape against 1 of the shape without a batch dimension (counted as growing).
    assert out is not None and out.shapes == 1 and out.fixed_share == pytest.approx(0.75)
    assert probes._batch_scale_probe(shapes, {7}, torch.device("cpu"), gen, time.perf_counter() + 0.5) is None


def test_run_probes_measures_the_fixed_share_of_the_steps_gemms() -> None:
    shapes = [[1, 2, 256, 256, 2 * 2 * 256 * 256 * 14], [1, 256, 256, 2, 2 * 2 * 256 * 256 * 7]]
    result = run_probes(torch.get_num_threads(), "cpu", budget_s=1.0, gemm_shapes=shapes, batch_rows={2})
    assert result.gemm_fixed_share is not None and 0.0 <= result.gemm_fixed_share <= 1.0
    # A shape whose pairs spread twice (a machine busy with other tests) is kept and marked disturbed.
    assert result.gemm_scale_probe[0] == probes.BATCH_SCALE_GROWTH and 1 <= result.gemm_scale_probe[1] <= 2
    assert isinstance(result.gemm_scale_disturbed, bool)
    assert run_probes(torch.get_num_threads(), "cpu", budget_s=0.5, gemm_shapes=shapes).gemm_fixed_share is None


def test_threads_probe_times_the_steps_gemms_and_the_elementwise_ops_on_their_outputs(monkeypatch) -> None:
    calls: list[str] = []

    def fake(sizes, make, device, deadline, setup_a=None, setup_b=None, work_exponent=3.0, smallest_first=False):
        a, _b = make(sizes[0])
        out = a()
        calls.append("gemm" if out.dim() == 2 else "elementwise")
        # Elementwise ops lose 3x with the oversized pool, GEMMs 1.5x.
        many = 3e-3 if calls[-1] == "elementwise" else 1.5e-3
        return probes.RatioResult(ratio=many / 1e-3, size=1, a_s=many, b_s=1e-3, spread=0.0)

    monkeypatch.setattr(probes, "_interleaved_ratio", fake)
    gen = torch.Generator().manual_seed(0)
    out = probes._threads_probe(8, 2, gen, time.perf_counter() + 0.5, [[1, 4, 16, 8, 2 * 4 * 16 * 8 * 5]])
    assert calls == ["gemm", "elementwise"]
    assert out is not None and out.source == "own_shapes"
    assert out.gemm_ratio == pytest.approx(1.5) and out.elementwise_ratio == pytest.approx(3.0)
    generic = probes._threads_probe(8, 2, gen, time.perf_counter() + 0.5, None)
    assert generic is not None and generic.source == "generic" and generic.elementwise_ratio == pytest.approx(3.0)


def test_a_product_too_slow_for_its_slice_is_timed_on_a_share_and_counted_back(monkeypatch) -> None:
    seen: list[float] = []

    def fake(sizes, make, device, deadline, setup_a=None, setup_b=None, work_exponent=3.0, smallest_first=False):
        assert work_exponent == 1.0 and sizes == probes.THREADS_PROBE_CUTS
        # Only the smallest share fits; its calls take that share of the full call's time.
        share = sizes[-1]
        make(share)
        seen.append(share)
        return probes.RatioResult(ratio=2.0, size=share, a_s=2e-3 * share, b_s=1e-3 * share, spread=0.0)

    monkeypatch.setattr(probes, "_interleaved_ratio", fake)
    built: list[float] = []
    work = [(3.0, lambda share: built.append(share) or (lambda: None)), (1.0, lambda share: (lambda: None))]
    ratio = probes._weighted_ratio(work, time.perf_counter() + 1.0, lambda: None, lambda: None, probes.THREADS_PROBE_CUTS)
    assert ratio == pytest.approx(2.0) and built == [probes.THREADS_PROBE_CUTS[-1]]
    assert seen == [probes.THREADS_PROBE_CUTS[-1]] * 2


def test_a_thread_probe_item_whose_pairs_spread_is_timed_again_and_the_steadier_kept(monkeypatch) -> None:
    # First attempt: other load moved the machine (ratio 0.2, spread 3x); the second is steady.
    answers = [probes.RatioResult(ratio=0.2, size=1, a_s=1e-3, b_s=5e-3, spread=3.0),
               probes.RatioResult(ratio=2.5, size=1, a_s=5e-3, b_s=2e-3, spread=0.05)]
    deadlines: list[float] = []

    def fake(sizes, make, device, deadline, setup_a=None, setup_b=None, work_exponent=3.0, smallest_first=False):
        deadlines.append(deadline)
        return answers[len(deadlines) - 1]

    monkeypatch.setattr(probes, "_interleaved_ratio", fake)
    end = time.perf_counter() + 1.0
    ratio = probes._weighted_ratio([(1.0, lambda share: (lambda: None))], end, lambda: None, lambda: None)
    assert ratio == pytest.approx(2.5)
    # The first attempt had half the slice, the repeat the rest.
    assert len(deadlines) == 2 and deadlines[0] < deadlines[1] <= end + 1e-3
    # A steady first attempt is not repeated.
    deadlines.clear()
    answers.reverse()
    assert probes._weighted_ratio([(1.0, lambda share: (lambda: None))], time.perf_counter() + 1.0,
                                  lambda: None, lambda: None) == pytest.approx(2.5)
    assert len(deadlines) == 1


def test_a_batch_scaling_shape_disturbed_twice_is_kept_and_marked(monkeypatch) -> None:
    calls: list[int] = []

    def spread_result(sizes, make, device, deadline, setup_a=None, setup_b=None, work_exponent=3.0):
        calls.append(1)
        return probes.RatioResult(ratio=0.5, size=1, a_s=1e-3, b_s=2e-3, spread=probes.PROBE_SPREAD_MAX * 2)

    monkeypatch.setattr(probes, "_interleaved_ratio", spread_result)
    shapes = [[1, 2, 64, 64, 2 * 2 * 64 * 64 * 4]]
    out = probes._batch_scale_probe(shapes, {2}, torch.device("cpu"), torch.Generator().manual_seed(0),
                                    time.perf_counter() + 0.5)
    assert len(calls) == 2  # timed, disturbed, timed again
    assert out is not None and out.disturbed and out.fixed_share == pytest.approx(
        probes.fixed_share_of_call(0.5, probes.BATCH_SCALE_GROWTH))


def test_smallest_first_prices_a_slow_call_on_its_smallest_share() -> None:
    """A call far slower than the slice (an oversized pool) is priced at the smallest share, so the
    slice is not spent finding out that the whole call does not fit."""
    calls: list[float] = []

    def make(share: float):
        def call() -> None:
            calls.append(share)
            time.sleep(0.4 * share)  # the whole call: 0.4 s; the slice below: 0.3 s
        return call, call

    cuts = (1.0, 0.25, 0.0625, 0.015625)
    start = time.perf_counter()
    result = probes._interleaved_ratio(cuts, make, torch.device("cpu"), start + 0.3, work_exponent=1.0,
                                       smallest_first=True)
    assert result is not None and result.size < 1.0
    assert 1.0 not in calls  # the whole call never ran
    assert result.ratio == pytest.approx(1.0, rel=0.5)


def test_spin_probe_reads_the_pools_spin_after_a_parallel_region(monkeypatch) -> None:
    # The probe's own arithmetic: 9 ms of process CPU in the sleep after a region, 1 ms in a quiet
    # one, over the one other thread of a 2-thread pool is 8 ms of spin.
    clock = iter([0.0, 0.009, 1.0, 1.001] * probes.SPIN_PAIRS)
    monkeypatch.setattr(probes.time, "process_time", lambda: next(clock))
    monkeypatch.setattr(probes.time, "sleep", lambda s: None)
    gen = torch.Generator().manual_seed(0)
    assert probes._spin_probe(2, gen, time.perf_counter() + 5) == pytest.approx(0.008)
    # A spin that fills the window has no end this probe can see: unbounded.
    clock = iter([0.0, probes.SPIN_WINDOW_S, 1.0, 1.0] * probes.SPIN_PAIRS)
    assert probes._spin_probe(2, gen, time.perf_counter() + 5) is None
    assert probes._spin_probe(1, gen, time.perf_counter() + 5) is None


def test_spin_probe_runs_for_a_pool_that_fits_the_cores() -> None:
    cores = dev.usable_cores()
    if cores < 2:
        pytest.skip("needs 2 usable cores")
    result = run_probes(2, "cpu", budget_s=1.5)
    assert result.pool_spin_probe == [2, round(probes.SPIN_WINDOW_S * 1e3)]
    # Whatever this machine's OpenMP does, the spin is inside the window or marked unbounded.
    assert result.pool_spin_s is None or 0.0 <= result.pool_spin_s < probes.SPIN_WINDOW_S


def test_wake_probe_finds_the_shortest_wait_that_pays(monkeypatch) -> None:
    # A machine whose pool sleeps after 20 ms of idle and then takes 10 ms to wake: the first op after
    # a longer sleep is 10 ms slower than back to back; after a shorter one it is not.
    slept = [0.0]
    now = [0.0]

    def sleep(s: float) -> None:
        slept[0] = s
        now[0] += s

    def perf_counter() -> float:
        now[0] += 1e-5
        return now[0]

    real_elementwise = probes._elementwise

    def elementwise(elements, gen, dtype=torch.float32):
        real_elementwise(16, gen, dtype)

        def op() -> None:
            if slept[0] >= 0.02:
                now[0] += 0.010
            slept[0] = 0.0
        return op

    monkeypatch.setattr(probes.time, "sleep", sleep)
    monkeypatch.setattr(probes.time, "perf_counter", perf_counter)
    monkeypatch.setattr(probes, "_elementwise", elementwise)
    gen = torch.Generator().manual_seed(0)
    result = probes._wake_probe(2, 0.068, gen, 100.0)
    assert result is not None
    assert result.wake_s == pytest.approx(0.010, abs=1e-4)
    assert result.min_wait_s == pytest.approx(0.032)  # 2, 4, 8, 16 ms did not pay; 32 ms did
    # No slice left after the run's own wait: every shorter wait is taken to pay.
    assert probes._wake_probe(2, 0.068, gen, 0.0).min_wait_s == probes.WAKE_FIRST_WAIT_S
    assert probes._wake_probe(1, 0.068, gen, 100.0) is None


def test_wake_probe_runs_after_a_run_that_waited() -> None:
    if dev.usable_cores() < 2:
        pytest.skip("needs 2 usable cores")
    result = run_probes(2, "cpu", budget_s=1.5, data_wait_s=0.02)
    assert result.pool_wake_probe == [2, 20]
    assert result.pool_wake_s is not None and result.pool_wake_s >= 0.0
    assert probes.WAKE_FIRST_WAIT_S <= result.pool_wake_min_wait_s <= 0.02
    # No wait measured, no wake probe.
    assert run_probes(2, "cpu", budget_s=0.5).pool_wake_probe == []


def test_weighted_ratio_with_require_all_gives_nothing_when_one_item_does_not_fit() -> None:
    # The slowest product at the script's threads is the one that does not fit its slice; the ratio of
    # the others would be biased low, so a ratio of every product or none.
    fast = (1.0, lambda share: (lambda: None))
    never = (1.0, lambda share: (lambda: time.sleep(0.2)))
    noop = lambda: None  # noqa: E731
    assert probes._weighted_ratio([fast, never], time.perf_counter() + 0.05, noop, noop) is not None
    assert probes._weighted_ratio([fast, never], time.perf_counter() + 0.05, noop, noop, require_all=True) is None


def test_neighbour_probe_times_a_share_of_a_call_too_slow_for_its_slice() -> None:
    # A product whose full call does not fit the slice (12 calls of 60 ms in 0.75 s) is timed on a
    # share of its rows rather than left out: with none fitting, the model fell back to fair sharing.
    shares: list[float] = []

    def make(_dtype: torch.dtype, share: float):
        shares.append(share)
        return lambda: time.sleep(0.06 * share)

    work = [probes.ProductWork(make, count=4.0, flops_per_step=1e9, label=[1, 64, 64, 64])]
    got = probes._neighbour_probe(2, torch.Generator().manual_seed(0), time.perf_counter() + 1.0, work)
    assert got is not None and got[1] == "own_shapes"
    assert got[0] == pytest.approx(1.0, abs=0.5)  # a sleep does not compete for a core
    assert min(shares) == min(probes.NEIGHBOUR_PROBE_CUTS) and max(shares) < 1.0


def test_free_cores_are_the_usable_ones_less_what_other_processes_held() -> None:
    assert probes.free_cores(2, None) == 2
    assert probes.free_cores(2, 0.2) == 2  # a machine's background, not another job
    assert probes.free_cores(2, 0.94) == 1
    assert probes.free_cores(4, 1.6) == 2
    assert probes.free_cores(2, 2.0) == 1  # at least one: the job ran on something


def test_beside_busy_processes_the_pool_is_also_timed_at_the_free_cores(monkeypatch) -> None:
    """A pool that fits the usable cores but not the free ones: the busy-threads probe times the
    step's products at both counts, and the rate probe runs at the free cores."""
    monkeypatch.setattr(dev, "cpu_has_native_bf16", lambda: False)
    monkeypatch.setattr(dev, "usable_cores", lambda: 2)
    shapes = [[1, 16, 256, 256, 2 * 16 * 256 * 256 * 4]]
    busy = run_probes(2, "cpu", budget_s=0.6, gemm_shapes=shapes, outside_cores=1.0)
    assert busy.busy_threads_probe == [2, 1]
    assert busy.busy_threads_speedup is not None or busy.busy_threads_elementwise_speedup is not None
    assert busy.matmul_rate_threads == 1
    quiet = run_probes(2, "cpu", budget_s=0.6, gemm_shapes=shapes, outside_cores=0.1)
    assert quiet.busy_threads_probe == [] and quiet.busy_threads_speedup is None
    assert quiet.matmul_rate_threads == 2
    # An oversized pool is THREAD_OVERSUBSCRIPTION's probe, at one thread per core, busy or not.
    over = run_probes(8, "cpu", budget_s=0.6, gemm_shapes=shapes, outside_cores=1.0)
    assert over.busy_threads_probe == [] and over.threads_probe == [8, 2] and over.matmul_rate_threads == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_neighbour_probes_busy_loop_dies_with_a_killed_doctor():
    """Killed mid-probe (SIGKILL), the doctor cannot kill its busy-loop child: the child must not
    keep a core of the user's machine busy after it."""
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\n"
         "from stave.monitor.probes import _Spinner\n"
         "s = _Spinner(); s.run()\n"
         "print(s.proc.pid, flush=True)\n"
         "time.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        child = int(parent.stdout.readline())
        time.sleep(0.3)
        assert _alive(child), "the spinner should spin while its parent lives"
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 5.0
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), "the busy loop outlived the killed doctor"
    finally:
        parent.kill()


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie awaiting its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_pinned_probe_runs_only_on_a_gpu_after_pageable_copies() -> None:
    # On a CPU there is no link to a device: nothing is planned, whatever the run copied.
    result = run_probes(1, "cpu", budget_s=0.5, pageable_copy_bytes=64 * 2**20)
    assert result.pinned_copy_speedup is None and result.pinned_copy_probe_bytes is None
    assert probes._pinned_copy_probe(64 * 2**20, torch.device("cpu"), time.perf_counter() + 0.5) is None


@pytest.mark.cuda
def test_the_pinned_probe_times_pageable_over_pinned_copies() -> None:
    result = run_probes(torch.get_num_threads(), "cuda", budget_s=2.0, pageable_copy_bytes=64 * 2**20)
    # A pinned copy is a direct DMA; a pageable one is staged through the driver's buffer: not faster.
    assert result.pinned_copy_speedup is not None and result.pinned_copy_speedup > 0.9
    assert 1024 <= result.pinned_copy_probe_bytes <= 64 * 2**20
    assert run_probes(torch.get_num_threads(), "cuda", budget_s=1.0).pinned_copy_speedup is None
