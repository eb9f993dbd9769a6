"""THREAD_OVERSUBSCRIPTION, BATCH_DTYPE, SMALL_BATCH, NO_MIXED_PRECISION, PYTHON_OVERHEAD, STEP_OUTLIERS."""

from __future__ import annotations

import dataclasses

import pytest
from synth_records import (
    BATCH,
    SCRIPT,
    STEPS,
    TensorInfo,
    healthy_config,
    healthy_loader,
    healthy_record,
    host_series,
    make_steps,
    run_all,
    run_rule,
    stack_profile,
    worker,
)

from stave.analyze.step_inputs import PIN_COPY_BYTES_PER_S
from stave.diagnose.rules import batch
from stave.diagnose.rules._helpers import micro_batches
from stave.measure import ProbeResults


def probes(**kw) -> ProbeResults:
    base = {"op_overhead_ns": 3000.0}
    base.update(kw)
    return ProbeResults(**base)


# --- THREAD_OVERSUBSCRIPTION ---------------------------------------------------------------------


def test_threads_fires_with_probe_ratio_applied_to_compute():
    rec = healthy_record(config=healthy_config(torch_threads=8), probes=probes(threads_speedup=2.0))
    f = run_rule("THREAD_OVERSUBSCRIPTION", rec)
    assert f is not None
    assert "torch.set_num_threads(2)" in f.fix
    # The compute (~96% of the step) loses the probe's 2x penalty; the loader workers' 0.3 core
    # still competes with the two threads left (the model's stretch 2.3 / 2), so the gain is less
    # than the bare halving (1.9x) and more than none.
    halved = 1 / (1 - 0.96 / 2)
    assert 1.4 < f.est_speedup < halved
    assert f.evidence["model_inputs_changed"]["compute_threads"] == [8, 2]


def _penalty_case(elementwise: float):
    """8 threads on 2 cores: 98.8 ms of compute (less 2.25 ms serial), 4.8e9 FLOPs at 1e11 FLOP/s
    (48 ms of GEMMs), GEMMs 1.2x faster at the cores' thread count, the elementwise ops as given.
    Returns (record, summary, parallel seconds, GEMM seconds)."""
    from stave.analyze.breakdown import summarize_steps

    rec = healthy_record(config=healthy_config(torch_threads=8, flops_by_phase={"forward": 1.6e9, "backward": 3.2e9}),
                         probes=probes(threads_speedup=1.2, threads_elementwise_speedup=elementwise,
                                       fp32_matmul_flops_per_s=1e11))
    summary = summarize_steps(rec.steps)
    parallel = sum(summary.phase_s(p) for p in ("h2d", "forward", "backward", "optimizer", "other")) - 2.25e-3
    return rec, summary, parallel, 0.048


def test_threads_penalty_weighs_gemms_and_elementwise_ops_by_their_time():
    from stave.analyze.step_inputs import oversubscription_penalty

    # The rest of the compute (48.55 ms) is elementwise, 4x faster at the cores' thread count.
    rec, summary, parallel, gemm = _penalty_case(4.0)
    expected = parallel / (gemm / 1.2 + (parallel - gemm) / 4.0)
    assert oversubscription_penalty(rec, summary, 2.25e-3) == pytest.approx(expected, rel=1e-3)
    # Without the elementwise half (an older record), the GEMMs' ratio stands for all.
    rec.probes = probes(threads_speedup=1.2)
    assert oversubscription_penalty(rec, summary, 2.25e-3) == pytest.approx(1.2)
    f = run_rule("THREAD_OVERSUBSCRIPTION", _penalty_case(4.0)[0])
    assert f.evidence["compute_penalty"] == pytest.approx(expected, rel=1e-3) and f.est_speedup > 1.4


def test_threads_prices_products_too_slow_to_probe_from_the_runs_own_timing():
    # 16 threads on 2 cores: the probe's convolution pairs did not fit (no GEMM ratio), its
    # elementwise half read 1.5x. The FLOP-counting step timed the products at 16 threads: 97 ms of
    # its 100 ms of op time, for 2e9 FLOPs that the rate probe (at 2 threads) does in 10 ms.
    from stave.analyze.breakdown import summarize_steps
    from stave.analyze.step_inputs import counted_products_ratio, oversubscription_penalty

    cfg = healthy_config(torch_threads=16, flops_by_phase={"forward": 7e8, "backward": 1.3e9},
                         op_s_by_phase={"forward": {"product": 0.030, "autocast_low": 0.002},
                                        "backward": {"product": 0.067, "autocast_low": 0.001}})
    rec = healthy_record(config=cfg, probes=probes(threads_speedup=None, threads_elementwise_speedup=1.5,
                                                   matmul_flops_per_s=2e11, matmul_rate_threads=2))
    ratio, share = counted_products_ratio(rec)
    assert ratio == pytest.approx(0.097 / 0.010) and share == pytest.approx(0.97)
    summary = summarize_steps(rec.steps)
    parallel = sum(summary.phase_s(p) for p in ("h2d", "forward", "backward", "optimizer", "other")) - 2.25e-3
    expected = parallel / (parallel * 0.97 / ratio + parallel * 0.03 / 1.5)
    assert oversubscription_penalty(rec, summary, 2.25e-3) == pytest.approx(expected, rel=1e-3)
    f = run_rule("THREAD_OVERSUBSCRIPTION", rec)
    assert f.evidence["products_ratio_from_run"] == pytest.approx(ratio) and f.est_speedup > 3
    # A rate timed at the script's own threads is no "one thread per core" reference: nothing.
    rec.probes = probes(threads_speedup=None, matmul_flops_per_s=2e11, matmul_rate_threads=16)
    assert counted_products_ratio(rec) is None
    assert run_rule("THREAD_OVERSUBSCRIPTION", rec).est_speedup == 1.0


def test_threads_takes_the_runs_own_product_timing_where_it_is_slower_than_the_probes():
    # 16 threads on 2 cores. The probe's products ran back to back (pool awake): 1.35x. In the step,
    # Python between the ops let the oversized pool sleep, and the counted step's products took 58 ms
    # for 1.08e9 FLOPs that the rate probe (2 threads) does in 10 ms: that is what the fix removes.
    from stave.analyze.breakdown import summarize_steps
    from stave.analyze.step_inputs import counted_products_ratio, oversubscription_penalty

    cfg = healthy_config(torch_threads=16, flops_by_phase={"forward": 4e8, "backward": 6.8e8},
                         op_s_by_phase={"forward": {"product": 0.050, "autocast_low": 0.001},
                                        "backward": {"product": 0.008, "autocast_low": 0.002}})
    pr = dict(threads_elementwise_speedup=1.8, matmul_flops_per_s=1.08e11, matmul_rate_threads=2)
    rec = healthy_record(config=cfg, probes=probes(threads_speedup=1.35, **pr))
    summary = summarize_steps(rec.steps)
    ratio, share = counted_products_ratio(rec)
    assert ratio == pytest.approx(5.8) and share == pytest.approx(58 / 61)
    parallel = sum(summary.phase_s(p) for p in ("h2d", "forward", "backward", "optimizer", "other")) - 2.25e-3
    assert oversubscription_penalty(rec, summary, 2.25e-3) == pytest.approx(
        parallel / (parallel * share / ratio + parallel * (1 - share) / 1.8), rel=1e-3)
    f = run_rule("THREAD_OVERSUBSCRIPTION", rec)
    assert f.evidence["products_ratio_from_run"] == pytest.approx(ratio)
    # Where the step's products ran no slower than the probe's, the probe's ratio stands.
    fast = healthy_config(torch_threads=16, flops_by_phase={"forward": 4e8, "backward": 6.8e8},
                          op_s_by_phase={"forward": {"product": 0.005}, "backward": {"product": 0.008}})
    rec2 = healthy_record(config=fast, probes=probes(threads_speedup=1.35, **pr))
    assert counted_products_ratio(rec2)[0] == pytest.approx(1.3) and oversubscription_penalty(
        rec2, summarize_steps(rec2.steps), 2.25e-3) < oversubscription_penalty(rec, summary, 2.25e-3)
    assert run_rule("THREAD_OVERSUBSCRIPTION", rec).est_speedup > run_rule("THREAD_OVERSUBSCRIPTION", rec2).est_speedup


def test_serial_ops_keep_their_time_when_the_pool_shrinks():
    # Dropout's mask and small ops run on one thread whatever the pool: their counted time beyond
    # dispatch is serial, which neither the oversized pool slowed nor a smaller pool speeds up.
    from stave.analyze.breakdown import summarize_steps
    from stave.analyze.step_inputs import fixed_and_serial_s

    kw = dict(torch_threads=8, flops_by_phase={"forward": 1.6e9, "backward": 3.2e9})
    pr = probes(threads_speedup=1.2, threads_elementwise_speedup=4.0, fp32_matmul_flops_per_s=1e11)
    plain = healthy_record(config=healthy_config(**kw), probes=pr)
    summary = summarize_steps(plain.steps)
    _, serial_plain = fixed_and_serial_s(plain, summary)
    rng = healthy_record(config=healthy_config(**kw, serial_op_s_by_phase={"forward": 0.020, "backward": 0.001},
                                               serial_ops_by_phase={"forward": 100, "backward": 100}), probes=pr)
    _, serial_rng = fixed_and_serial_s(rng, summary)
    # 21 ms in 200 serial ops, less their dispatch (200 x 3 us) already counted.
    assert serial_rng - serial_plain == pytest.approx(0.021 - 200 * 3e-6)
    before = run_rule("THREAD_OVERSUBSCRIPTION", plain)
    after = run_rule("THREAD_OVERSUBSCRIPTION", rng)
    assert after.evidence["compute_penalty"] < before.evidence["compute_penalty"]
    assert 1.0 < after.est_speedup < before.est_speedup


def test_threads_without_probe_is_information_only():
    rec = healthy_record(config=healthy_config(torch_threads=8), probes=probes(threads_speedup=None))
    f = run_rule("THREAD_OVERSUBSCRIPTION", rec)
    assert f is not None and f.est_speedup == 1.0 and f.severity == "info"


def test_threads_without_measured_harm_is_information_only():
    rec = healthy_record(config=healthy_config(torch_threads=8), probes=probes(threads_speedup=0.9))
    f = run_rule("THREAD_OVERSUBSCRIPTION", rec)
    assert f is not None and f.est_speedup == 1.0 and f.severity == "info"
    assert "no slowdown measured" in f.title


@pytest.mark.parametrize("threads,ratio", [(2, 2.0), (1, None), (None, 2.0)])
def test_threads_quiet(threads, ratio):
    rec = healthy_record(config=healthy_config(torch_threads=threads), probes=probes(threads_speedup=ratio))
    assert run_rule("THREAD_OVERSUBSCRIPTION", rec) is None


# --- BATCH_DTYPE -----------------------------------------------------------------------------------


def f64_config(model_dtype: str):
    return healthy_config(
        batch=[TensorInfo("batch[0]", "float64", [32, 256], "cpu", 32 * 256 * 8),
               TensorInfo("batch[1]", "int64", [32], "cpu", 256)],
        param_dtypes={model_dtype: 1_000_000},
    )


def test_float64_batches_with_float64_model():
    f = run_rule("BATCH_DTYPE", healthy_record(config=f64_config("float64")))
    assert f is not None
    assert f.evidence["model_param_dtype"] == "float64"
    assert "astype(np.float32)" in f.fix
    # Compute (~96% of the step) at twice the rate, less what the loader's 0.4 core still takes.
    assert 1.4 < f.est_speedup < 1 / (1 - 0.96 / 2)
    assert f.evidence["model_inputs_changed"]["phase_speed"]["forward"] == 2.0


def test_float64_batches_cast_for_float32_model_on_cpu_is_information():
    f = run_rule("BATCH_DTYPE", healthy_record(config=f64_config("float32")))
    assert f is not None and f.severity == "info"


def test_batch_dtype_quiet_on_float32_batches_and_without_batch_info():
    assert run_rule("BATCH_DTYPE", healthy_record()) is None
    assert run_rule("BATCH_DTYPE", healthy_record(config=healthy_config(batch=[]))) is None


# --- SMALL_BATCH -----------------------------------------------------------------------------------


def tiny_steps():
    return make_steps(lambda i: {"data_wait": 1.0, "forward": 3.0, "backward": 4.0, "optimizer": 5.0, "other": 1.0},
                      samples=2)


def _per_sample(k: float) -> float:
    """Samples/s gain of tiny_steps() at a k-times batch: fixed 7.25 ms (optimizer 5 + dispatch
    750 ops x 3 us) stays, the 5.75 ms of per-sample compute grows k-fold, the 1 ms wait
    (prefetched batches, which the model does not explain) is kept as it is."""
    return k * 14 / (7.25 + 5.75 * k + 1.0)


def test_small_batch_from_fixed_costs():
    rec = healthy_record(steps=tiny_steps(), probes=probes())
    f = run_rule("SMALL_BATCH", rec)
    assert f is not None
    share = 7.25 / 14
    assert f.evidence["fixed_share"] == pytest.approx(share, rel=0.01)
    # The batch named: doubled while a doubling still gains 5%, and no further.
    k = f.evidence["batch_growth"]
    assert _per_sample(k) / _per_sample(k / 2) >= 1.05
    assert _per_sample(2 * k) / _per_sample(k) < 1.05
    assert f.est_speedup == pytest.approx(_per_sample(k), rel=0.02)
    assert f.est_speedup > 1 / (share / k + 1 - share)  # the data wait is not per sample
    assert f"batch_size={32 * k}" in f.fix and f"lr = base_lr * {k}" in f.fix
    assert f.evidence["model_inputs_changed"] == {"batch_scale": [1, k]}


def test_small_batch_never_names_a_batch_beyond_linear_lr_scaling():
    # All fixed and no loading to wait for: per-sample time keeps falling, but the batch grows at
    # most SMALL_BATCH_MAX_GROWTH times and to at most LARGE_BATCH_MAX samples.
    def growth(samples: int) -> int:
        steps = make_steps(lambda i: {"data_wait": 0.0, "forward": 0.01, "backward": 0.01, "optimizer": 9.0,
                                      "other": 0.01}, samples=samples)
        f = run_rule("SMALL_BATCH", healthy_record(steps=steps, probes=probes(), workers=[]))
        assert f is not None and f.est_speedup <= f.evidence["batch_growth"]
        return f.evidence["batch_growth"]

    assert growth(2) == batch.SMALL_BATCH_MAX_GROWTH
    assert 1024 * growth(1024) <= batch.LARGE_BATCH_MAX < 1024 * 2 * growth(1024)


def test_small_batch_with_accumulation_prices_the_micro_batch():
    steps = tiny_steps()
    for s in steps:
        s.backward_calls = 4  # 4 micro-batches of 2 per optimizer step (8 samples per step)
        s.data_fetches = 4
        s.samples = 8
    f = run_rule("SMALL_BATCH", healthy_record(steps=steps, probes=probes()))
    assert f is not None
    assert f.evidence["micro_batches_per_step"] == 4
    # All micro-batches merged: same samples per step and learning rate, so nothing argues for less.
    assert f.evidence["batch_growth"] == 4
    assert "accumulation_steps = 1" in f.fix and "lr = base_lr" not in f.fix
    # Same samples per step: only the dispatch (2.25 ms) shrinks 4x; the optimizer stays. The bare
    # saving is the bound; the loader's CPU over a shorter step then competes a little more.
    assert 1.05 < f.est_speedup <= 14 / (14 - 2.25 * 0.75) + 1e-3


def test_small_batch_accumulation_merges_only_whole_micro_batches():
    steps = tiny_steps()
    for s in steps:
        s.backward_calls = s.data_fetches = 6
        s.samples = 12
    # Loading light enough that the two workers keep up with the 12 samples a step.
    light = [worker(i, 600, wall_us=200.0, cpu_us=150.0) for i in range(2)]
    rec = healthy_record(steps=steps, probes=probes(), workers=light)
    f = run_rule("SMALL_BATCH", rec)
    assert f is not None and f.evidence["batch_growth"] == 6
    # Where GPU memory holds only a 4x micro-batch, the largest divisor of 6 within it is 3.
    rec.config = dataclasses.replace(rec.config, device_type="cuda", device_total_memory_bytes=int(4.5e9))
    rec.host = [dataclasses.replace(h, cuda_peak_bytes=int(1e9)) for h in rec.host]
    g = run_rule("SMALL_BATCH", rec)
    assert g is not None and g.evidence["batch_growth"] == 3


def test_small_batch_backward_passes_over_one_fetched_batch_are_not_micro_batches():
    # A gradient penalty's autograd.grad, or one backward per loss, over the single batch the step
    # fetched: no accumulation to merge. Nor with two optimizers (a GAN), whatever the fetches.
    steps = tiny_steps()
    for s in steps:
        s.backward_calls, s.data_fetches = 3, 1
    rec = healthy_record(steps=steps, probes=probes())
    assert micro_batches(rec) == 1
    for s in steps:
        s.data_fetches = 3
    assert micro_batches(rec) == 3
    two = dataclasses.replace(rec.config, optimizers=[*rec.config.optimizers, *rec.config.optimizers])
    assert micro_batches(dataclasses.replace(rec, config=two)) == 1


def _main_process_record(collate_us: float):
    """2 samples per step loaded in the main process (20 us each), a 0.2 ms median data wait."""
    steps = make_steps(lambda i: {"data_wait": 0.2, "forward": 0.1, "backward": 0.1, "optimizer": 0.4, "other": 0.05},
                       samples=2)
    stages = {"load": (20.0, 20.0), "collate": (collate_us, collate_us)}
    loader = healthy_loader(num_workers=0, persistent_workers=False, prefetch_factor=None, batch_size=2)
    small = [TensorInfo("batch[0]", "float32", [2, 32], "cpu", 256)]
    return healthy_record(steps=steps, probes=probes(), config=healthy_config(loaders=[loader], batch=small),
                          workers=[worker(-1, 2 * 40, 20.0 + collate_us, 20.0 + collate_us, stages=stages)])


def test_small_batch_main_process_collate_is_paid_per_batch():
    # Collate takes 30 us per sample (60 us a call), of which one microsecond per sample and the
    # copy of the batch's bytes grow with the batch.
    f = run_rule("SMALL_BATCH", _main_process_record(30.0))
    assert f is not None
    per_call = 60e-6 - 2 * batch.COLLATE_S_PER_SAMPLE - 256 / PIN_COPY_BYTES_PER_S
    assert f.evidence["collate_per_batch_s"] == pytest.approx(per_call, rel=0.01)
    # The wait beyond loading and collating (200 - 40 - 60 us) is the fetch's own per-batch overhead.
    assert f.evidence["loader_overhead_s"] == pytest.approx(100e-6, rel=0.05)


def test_small_batch_main_process_loading_is_bounded_by_the_median_wait():
    # One collate call among 40 stalled (the stage's mean reads 3 ms a sample): the median step
    # waits 0.2 ms for its batch, and in the main process loading is inside that wait.
    f = run_rule("SMALL_BATCH", _main_process_record(3000.0))
    assert f is not None
    assert 0 < f.evidence["collate_per_batch_s"] < 0.2e-3
    assert f.evidence["fixed_s_per_step"] <= f.evidence["step_time_s"]


def test_small_batch_counts_op_bound_compute_as_fixed():
    def rec_with(flops_fwd: float, flops_bwd: float):
        rec = healthy_record(steps=tiny_steps(), probes=probes(fp32_matmul_flops_per_s=1e11))
        rec.config = dataclasses.replace(rec.config, flops_by_phase={"forward": flops_fwd, "backward": flops_bwd})
        return rec

    # 3 MFLOP at 1e11 FLOP/s is 0.03 ms of 7 ms forward+backward, and 750 ops average 9.3 us (under
    # ten 3-us dispatches): the compute is per-op overhead, fixed per step.
    f = run_rule("SMALL_BATCH", rec_with(1e6, 2e6))
    # The loss and bookkeeping between the phases (1 ms of "other", no FLOPs) work on the outputs of
    # an op-bound model: fixed too.
    assert f.evidence["other_s"] == pytest.approx(1e-3, rel=0.01)
    assert f.evidence["fixed_share"] == pytest.approx((5.0 + 7.0 - 0.03 + 1.0) / 14, rel=0.01)
    # 300 MFLOP is 3 ms, 43% of the compute: the data does the work; only the bare dispatch is fixed.
    g = run_rule("SMALL_BATCH", rec_with(1e8, 2e8))
    assert g.evidence["fixed_share"] == pytest.approx(7.25 / 14, rel=0.01)
    assert "other_s" not in g.evidence
    assert f.est_speedup > g.est_speedup


LOSS_LOOP_SOURCE = """\
def per_sample_loss(out, y):
    loss = out.new_zeros(())
    for i in range(len(y)):
        loss = loss + F.cross_entropy(out[i : i + 1], y[i : i + 1])
    return loss
"""


def test_small_batch_per_sample_loop_ops_are_not_fixed(tmp_path):
    # The same op-bound tiny model, but the loss loops over the batch's samples (192 ops in "other",
    # and backward replays their nodes): those ops grow with the batch.
    script = tmp_path / "train.py"
    script.write_text(LOSS_LOOP_SOURCE, encoding="utf-8")

    def rec_with(other_ops: int, line: int):
        steps = tiny_steps()
        rec = healthy_record(steps=steps, probes=probes(fp32_matmul_flops_per_s=1e11))
        rec.config = dataclasses.replace(rec.config, flops_by_phase={"forward": 1e6, "backward": 2e6},
                                         aten_ops_by_phase={"forward": 30, "backward": 250,
                                                            "optimizer": 120, "other": other_ops})
        rec.stacks = stack_profile(steps, {"other": [(line, 1.0)]}, interval_ms=0.1)
        rec.stacks.frames = [dataclasses.replace(f, file=str(script)) for f in rec.stacks.frames]
        return rec

    looped = run_rule("SMALL_BATCH", rec_with(192, 4))
    # Only the model's 30 forward ops and their 30/222 of backward's 250 nodes are fixed.
    share = (30 + 250 * 30 / 222) / 280
    assert looped.evidence["fixed_op_share"] == pytest.approx(share, rel=1e-3)
    assert looped.evidence["dispatch_s"] == pytest.approx((7e-3 - 3e-5) * share, rel=0.01)
    assert "other_s" not in looped.evidence
    # The time sits on a line outside any loop: the ops are the loss's own, fixed work as before.
    flat = run_rule("SMALL_BATCH", rec_with(192, 2))
    assert flat.evidence["fixed_op_share"] == 1.0 and flat.evidence["other_s"] == pytest.approx(1e-3, rel=0.01)
    # In a loop but under one op per sample (tiny_steps' batch is 2): not a loop over the batch.
    few = run_rule("SMALL_BATCH", rec_with(1, 4))
    assert few.evidence["fixed_op_share"] == 1.0
    assert flat.est_speedup > looped.est_speedup


def test_small_batch_counts_the_per_call_share_the_batch_scale_probe_measured():
    # 3 MFLOP at the own shapes' 1e9 FLOP/s is 3 ms of 7 ms: not op-bound, so only the bare
    # dispatch was fixed. The probe timed those shapes at 8x the rows: 90% of their time stayed.
    def rec_with(share: float | None, shapes_flops: float):
        rec = healthy_record(steps=tiny_steps(), probes=probes(fp32_matmul_flops_per_s=1e9, gemm_fixed_share=share))
        rec.config = dataclasses.replace(rec.config, flops_by_phase={"forward": 1e6, "backward": 2e6},
                                         gemm_shapes=[[1, 2, 256, 256, int(shapes_flops)]])
        return rec

    without = run_rule("SMALL_BATCH", rec_with(None, 3e6))
    assert without.evidence["dispatch_s"] == pytest.approx(750 * 3e-6, rel=1e-3)
    probed = run_rule("SMALL_BATCH", rec_with(0.9, 3e6))
    # The probed shapes hold the step's FLOPs: the FLOP-free rest of forward/backward (activations,
    # autograd) is at least as per-call, so 90% of the 7 ms is fixed, and 90% of the loss's 1 ms.
    assert probed.evidence["dispatch_s"] == pytest.approx(0.9 * 7e-3, rel=0.01)
    assert probed.evidence["other_s"] == pytest.approx(0.9 * 1e-3, rel=0.01)
    assert probed.est_speedup > without.est_speedup
    # Shapes holding a minority of the FLOPs: only the GEMMs' own time (3 ms) is priced by the probe.
    partial = run_rule("SMALL_BATCH", rec_with(0.9, 1e6))
    assert partial.evidence["dispatch_s"] == pytest.approx(0.9 * 3e-3, rel=0.01)


def test_small_batch_gemm_share_does_not_speak_for_ops_heavier_than_the_gemms():
    # An LSTM's fused kernel: 50 ops in forward+backward take 7 ms (140 us each, far beyond a
    # dispatch: not op-bound) beside 29 tiny GEMM calls of 1 us at the rate. The batch-scaling
    # probe's 90% per-call share is the tiny GEMMs'; the heavy ops do work the FLOP counter does not
    # see, so only the GEMMs' own time is priced as fixed.
    def rec_with(ops: dict[str, int]):
        rec = healthy_record(steps=tiny_steps(), probes=probes(fp32_matmul_flops_per_s=1e9, gemm_fixed_share=0.9))
        rec.config = dataclasses.replace(rec.config, flops_by_phase={"forward": 1e4, "backward": 2e4},
                                         gemm_shapes=[[1, 2, 16, 16, int(3e4)]], aten_ops_by_phase=ops)
        return rec

    lstm = run_rule("SMALL_BATCH", rec_with({"forward": 20, "backward": 30}))
    assert lstm is None or lstm.evidence["dispatch_s"] < 0.1 * 7e-3
    # The same GEMMs among 2000 light ops (3.5 us each: per-op overhead): the share speaks for them.
    light = run_rule("SMALL_BATCH", rec_with({"forward": 800, "backward": 1200}))
    assert light is not None and light.evidence["dispatch_s"] >= 0.9 * 7e-3 * 0.99


def test_small_batch_gemm_share_speaks_for_ops_of_the_same_order_as_a_gemm_call():
    # 800 tiny GEMM calls of 1 us at the rate hold over a tenth of forward+backward's 7 ms (so the
    # op-bound test does not apply); the 4120 other ops take 1.5 us each: heavier than a GEMM call by
    # an autograd node and a module call, the same per-call cost. The probe's 90% share speaks for them.
    flops = 800 * 2 * 2 * 16 * 16
    rec = healthy_record(steps=tiny_steps(), probes=probes(fp32_matmul_flops_per_s=1e9, gemm_fixed_share=0.9,
                                                           op_overhead_ns=300.0))
    rec.config = dataclasses.replace(rec.config, flops_by_phase={"forward": flops / 3, "backward": 2 * flops / 3},
                                     gemm_shapes=[[1, 2, 16, 16, flops]],
                                     aten_ops_by_phase={"forward": 1968, "backward": 2952})
    same_order = run_rule("SMALL_BATCH", rec)
    assert same_order is not None and same_order.evidence["dispatch_s"] >= 0.9 * 7e-3 * 0.99


def test_small_batch_op_bound_compute_keeps_the_probed_per_call_share_of_its_flops():
    # 0.3 MFLOP at the own shapes' 1e9 FLOP/s is 0.3 ms of 7 ms: op-bound, so the other 6.7 ms are
    # per-op overhead. The 0.3 ms are those shapes' own time, and the batch-scaling probe measured
    # half of it as per call: fixed too, where before it all counted as per-sample. (No loader
    # workers: the larger batch is not held back by its loading.)
    def rec_with(share: float | None):
        rec = healthy_record(steps=tiny_steps(), probes=probes(fp32_matmul_flops_per_s=1e9, gemm_fixed_share=share),
                             workers=[])
        rec.config = dataclasses.replace(rec.config, flops_by_phase={"forward": 1e5, "backward": 2e5},
                                         gemm_shapes=[[1, 2, 256, 256, int(3e5)]])
        return rec

    without = run_rule("SMALL_BATCH", rec_with(None))
    assert without.evidence["dispatch_s"] == pytest.approx(7e-3 - 3e-4, rel=1e-3)
    probed = run_rule("SMALL_BATCH", rec_with(0.5))
    assert probed.evidence["dispatch_s"] == pytest.approx(7e-3 - 3e-4 + 0.5 * 3e-4, rel=1e-3)
    assert probed.est_speedup > without.est_speedup


def test_small_batch_op_bound_without_a_flop_rate_uses_the_floor():
    # No fp32 rate measured: the FLOPs are timed at MIN_FLOPS_PER_S, which overstates them.
    def rec_with(flops: float):
        rec = healthy_record(steps=tiny_steps(), probes=probes())
        rec.config = dataclasses.replace(rec.config, flops_by_phase={"forward": flops, "backward": flops})
        return rec

    tiny = run_rule("SMALL_BATCH", rec_with(1e4))  # 20 kFLOP: 10 us at the floor, op-bound
    assert tiny.evidence["dispatch_s"] == pytest.approx(7e-3 - 2e4 / batch.MIN_FLOPS_PER_S, rel=1e-3)
    real = run_rule("SMALL_BATCH", rec_with(1e6))  # 2 MFLOP: 1 ms at the floor, 14% of 7 ms: not shown op-bound
    assert real.evidence["dispatch_s"] == pytest.approx(750 * 3e-6, rel=1e-3)


def test_small_batch_never_from_batch_size_alone():
    # Same tiny batch, but the step is all batch-proportional compute: no finding.
    steps = make_steps(lambda i: {"data_wait": 1.0, "forward": 40.0, "backward": 55.0, "optimizer": 1.0, "other": 1.0},
                       samples=2)
    assert run_rule("SMALL_BATCH", healthy_record(steps=steps, probes=probes())) is None
    assert run_rule("SMALL_BATCH", healthy_record(probes=probes())) is None


def test_small_batch_absent_overhead_probe_is_not_evidence():
    # optimizer 3 ms + dispatch 2.25 ms of 13 ms is over a third; the optimizer alone is not.
    steps = make_steps(lambda i: {"data_wait": 1.0, "forward": 4.0, "backward": 4.0, "optimizer": 3.0, "other": 1.0},
                       samples=2)
    assert run_rule("SMALL_BATCH", healthy_record(steps=steps, probes=probes())) is not None
    assert run_rule("SMALL_BATCH", healthy_record(steps=steps, probes=probes(op_overhead_ns=None))) is None


# --- NO_MIXED_PRECISION ----------------------------------------------------------------------------


def bf16_record(**cfg):
    config = healthy_config(bf16_native=True, **cfg)
    return healthy_record(config=config, probes=probes(bf16_speedup=2.0))


def test_mixed_precision_fires_with_measured_ratio():
    f = run_rule("NO_MIXED_PRECISION", bf16_record())
    assert f is not None
    assert 'torch.autocast("cpu", dtype=torch.bfloat16)' in f.fix
    # forward+backward ~88 ms less 750 ops x 3 us of dispatch, halved: 1.76x if nothing else moved.
    # In the step model the loader workers' 0.4 core then takes a larger share of the two cores
    # (the same loading over a shorter step), so the estimate is lower, and still well above 1.
    fb = 0.0888
    bare = 0.1 / (0.1 - (fb - 0.00225) / 2)
    assert 1.4 < f.est_speedup < bare
    assert f.evidence["bf16_probe_source"] == "generic" and f.certain
    assert f.evidence["model_inputs_changed"]["phase_speed"]["forward"] > 1.5


def test_mixed_precision_from_own_shapes_and_a_disturbed_probe_is_not_certain():
    rec = bf16_record()
    rec.probes = probes(bf16_speedup=1.05, bf16_probe_source="own_shapes",
                        bf16_probe_shapes=[[1, 4096, 128, 384, 10**9]])
    # nanoGPT-like shapes where bf16 buys nothing: no finding, whatever a square GEMM would say.
    assert run_rule("NO_MIXED_PRECISION", rec) is None
    rec.probes = probes(bf16_speedup=2.0, bf16_probe_disturbed=True)
    f = run_rule("NO_MIXED_PRECISION", rec)
    assert f is not None and not f.certain and "disturbed" in f.explanation


def test_mixed_precision_bounded_by_counted_flops_at_probe_rate():
    rec = bf16_record()
    rec.probes.fp32_matmul_flops_per_s = 3e12  # 3e10 FLOPs take only 10 ms at this rate
    f = run_rule("NO_MIXED_PRECISION", rec)
    assert f is not None
    assert f.evidence["autocast_s"] == pytest.approx(0.01, rel=0.01)
    assert f.est_speedup == pytest.approx(0.1 / 0.095, rel=0.01)


@pytest.mark.parametrize(
    "changes,ratio",
    [({"bf16_native": False}, 2.0), ({}, None), ({}, 1.2), ({"autocast_enabled": True}, 2.0),
     ({"param_dtypes": {"float64": 10}}, 2.0)],
)
def test_mixed_precision_quiet(changes, ratio):
    config = healthy_config(**{"bf16_native": True, **changes})
    rec = healthy_record(config=config, probes=probes(bf16_speedup=ratio))
    assert run_rule("NO_MIXED_PRECISION", rec) is None


def test_mixed_precision_not_claimed_for_dispatch_bound_steps():
    steps = make_steps(lambda i: {"data_wait": 1.0, "forward": 3.0, "backward": 4.0, "optimizer": 5.0, "other": 1.0})
    rec = healthy_record(steps=steps, config=healthy_config(bf16_native=True),
                         probes=probes(bf16_speedup=2.0, op_overhead_ns=10_000.0))
    assert run_rule("NO_MIXED_PRECISION", rec) is None


# --- PYTHON_OVERHEAD -------------------------------------------------------------------------------


def loop_record(with_stacks: bool = True, other_ms: float = 45.0, rate: float | None = 1e12, other_ops: int = 4000,
                backward_ops: int = 4150):
    # The loop's ops record autograd nodes: backward replays the model's 150 ops and the loop's 4000.
    steps = make_steps(lambda i: {"data_wait": 2.0, "forward": 20.0, "backward": 30.0, "optimizer": 3.0,
                                  "other": other_ms})
    rec = healthy_record(steps=steps, probes=probes(fp32_matmul_flops_per_s=rate))
    rec.config = healthy_config(aten_ops_by_phase={"forward": 100, "backward": backward_ops, "other": other_ops})
    rec.stacks = stack_profile(steps, {"other": [(55, 0.8), (60, 0.2)]} if with_stacks else {}, interval_ms=2.0)
    if not with_stacks:
        rec.stacks.samples = []
    return rec


def test_python_overhead_names_the_loop_line():
    f = run_rule("PYTHON_OVERHEAD", loop_record())
    assert f is not None
    assert f.lines[0] == f"{SCRIPT}:55"
    assert f"{SCRIPT}:55" in f.title
    # Backward 30 ms, of which 2e10 FLOPs at 1e12 FLOP/s = 20 ms is FLOP work; the other 10 ms is
    # per-op work over 4150 ops, of which the model's 100 forward ops explain at most 300: the
    # other 3850 replay the loop's nodes.
    t = sum((2.0, 20.0, 30.0, 3.0, 45.0)) / 1e3
    replay = 0.010 * 3850 / 4150
    assert f.evidence["backward_replay_s"] == pytest.approx(replay, rel=0.01)
    # The bare saving is the bound; in the step model the loader's 0.4 core of loading then falls
    # into a shorter step and takes a little more of the two cores.
    bare = t / (t - 0.045 - replay)
    assert 0.85 * bare < f.est_speedup <= bare + 1e-3


def test_python_overhead_under_no_grad_causes_no_backward_replay():
    # A metric loop under no_grad records no nodes: backward has only the model's ops.
    f = run_rule("PYTHON_OVERHEAD", loop_record(backward_ops=150))
    assert f is not None and f.evidence["backward_replay_s"] == 0.0


def test_python_overhead_from_op_counts_when_the_run_is_too_short_for_lines():
    # No stack samples: the 4000 ops between the phases (over one per sample, beyond bookkeeping)
    # still show a loop over the batch, and its backward replay is counted.
    f = run_rule("PYTHON_OVERHEAD", loop_record(with_stacks=False))
    assert f is not None and f.lines == []
    assert f.evidence["backward_replay_s"] == pytest.approx(0.010 * 3850 / 4150, rel=0.01)
    # A handful of ops (a loss, a metric): the 'other' time alone, as before.
    g = run_rule("PYTHON_OVERHEAD", loop_record(with_stacks=False, other_ops=20))
    assert g is not None and g.evidence["backward_replay_s"] == 0.0 and g.est_speedup < f.est_speedup


def test_python_overhead_counts_the_backward_it_causes_toward_the_threshold():
    # 'other' alone is under 15% of the step, but with its backward replay the loop is over it.
    steps = make_steps(lambda i: {"data_wait": 2.0, "forward": 5.0, "backward": 60.0, "optimizer": 3.0, "other": 12.0})
    rec = healthy_record(steps=steps, probes=probes(fp32_matmul_flops_per_s=1e15))
    rec.config = healthy_config(aten_ops_by_phase={"forward": 10, "backward": 800, "other": 790})
    rec.stacks = stack_profile(steps, {"other": [(55, 1.0)]}, interval_ms=1.0)
    f = run_rule("PYTHON_OVERHEAD", rec)
    assert f is not None and f.est_speedup > 2.0
    # Without the FLOP rate the replay is unknown, and 'other' alone is below the bar.
    rec.probes.fp32_matmul_flops_per_s = None
    assert run_rule("PYTHON_OVERHEAD", rec) is None


def test_python_overhead_without_stack_samples_reports_the_time_alone():
    # Too short a run for the stacks: the 'other' time still counts, without lines (and, with a
    # bookkeeping-sized op count, without replay).
    f = run_rule("PYTHON_OVERHEAD", loop_record(with_stacks=False, other_ops=20))
    assert f is not None
    assert f.lines == []
    assert f.evidence["stack_samples_in_other"] == 0
    t = sum((2.0, 20.0, 30.0, 3.0, 45.0)) / 1e3
    assert 0.9 * t / (t - 0.045) < f.est_speedup <= t / (t - 0.045) + 1e-3  # bound, as above
    assert "--flamegraph" in f.fix
    # ...and only when 'other' alone is a large share of the step.
    assert run_rule("PYTHON_OVERHEAD", loop_record(with_stacks=False, other_ms=8.0, other_ops=20)) is None


def test_python_overhead_without_lines_leaves_out_the_time_inside_torch_ops():
    # float64_tabular's loop: 45 ms of 'other' a step, of which the FLOP-counting step timed 40 ms
    # inside 20 ops (the cast of a large float64 batch, touching a worker's shared memory): what is
    # left for Python is under the bar.
    rec = loop_record(with_stacks=False, other_ops=20)
    rec.config.op_s_by_phase = {"other": {"autocast_fp32": 0.040}}
    assert run_rule("PYTHON_OVERHEAD", rec) is None
    rec.config.op_s_by_phase = {"other": {"autocast_fp32": 0.005}}
    f = run_rule("PYTHON_OVERHEAD", rec)
    work = 0.005 - 20 * 5.0 * rec.probes.op_overhead_ns / 1e9  # beyond 5 dispatches an op
    assert f is not None and f.evidence["op_work_s_in_other"] == pytest.approx(work)
    assert f.evidence["other_s"] == pytest.approx(0.045 - work)
    # A loop of many tiny ops: their time is the loop's cost, not work a rewrite keeps.
    rec = loop_record(with_stacks=False)
    base = run_rule("PYTHON_OVERHEAD", rec)
    rec.config.op_s_by_phase = {"other": {"autocast_fp32": 4000 * 2 * rec.probes.op_overhead_ns / 1e9}}
    assert run_rule("PYTHON_OVERHEAD", rec).est_speedup == pytest.approx(base.est_speedup)


def test_python_overhead_quiet_on_healthy_steps():
    # A little Python issuing a few ops: bookkeeping, not a finding.
    assert run_rule("PYTHON_OVERHEAD", loop_record(other_ms=5.0, other_ops=30)) is None
    assert run_rule("PYTHON_OVERHEAD", healthy_record()) is None


# --- STEP_OUTLIERS ----------------------------------------------------------------------------------


def checkpoint_record():
    def phases(i: int):
        p = {"data_wait": 2.0, "forward": 38.0, "backward": 50.0, "optimizer": 6.0, "other": 4.0}
        if i % 10 == 9:
            p["other"] = 404.0
        return p

    steps = make_steps(phases)
    rec = healthy_record(steps=steps)
    rec.stacks = stack_profile(steps, {"other": [(88, 1.0)]})
    return rec


def test_step_outliers_finds_periodic_stall_and_its_line():
    rec = checkpoint_record()
    f = run_rule("STEP_OUTLIERS", rec)
    assert f is not None
    assert f.evidence["period_steps"] == 10
    assert f.evidence["outliers"] == 4
    assert f"{SCRIPT}:88" in f.lines
    # CPU-only: the save needs the training's cores, so less often (0.4 s at most 2% of 0.1 s steps).
    assert "if step % 200 == 200 - 1:" in f.fix
    gpu = checkpoint_record()
    gpu.config.device_type = "cuda"
    assert "threading.Thread" in run_rule("STEP_OUTLIERS", gpu).fix
    mean = (36 * 0.1 + 4 * 0.5) / 40
    assert f.est_speedup == pytest.approx(mean / 0.1, rel=0.02)
    # The stall lives in 'other', but the typical step is fine: no Python-overhead finding.
    assert run_rule("PYTHON_OVERHEAD", rec) is None


def backward_stall_steps(every: int | None):
    def phases(i: int):
        p = {"data_wait": 2.0, "forward": 38.0, "backward": 50.0, "optimizer": 6.0, "other": 4.0}
        stalled = (i % every == every - 1) if every else i in (7, 8, 19, 31, 33)
        if stalled:
            p["backward"] = 400.0
        return p

    return make_steps(phases)


def test_step_outliers_in_model_phases_need_a_rhythm():
    # Irregular stalls in backward: what a busy shared machine produces; periodic ones: the script's.
    assert run_rule("STEP_OUTLIERS", healthy_record(steps=backward_stall_steps(None))) is None
    f = run_rule("STEP_OUTLIERS", healthy_record(steps=backward_stall_steps(8)))
    assert f is not None and f.evidence["period_steps"] == 8 and "backward" in f.title


def test_step_outliers_quiet_on_jitter():
    steps = make_steps(lambda i: {"forward": 40.0 + (i % 3) * 8.0, "backward": 50.0, "other": 4.0})
    assert run_rule("STEP_OUTLIERS", healthy_record(steps=steps)) is None
    assert run_rule("STEP_OUTLIERS", healthy_record()) is None


def test_healthy_record_has_no_warning():
    assert [f.id for f in run_all(healthy_record()) if f.severity != "info"] == []


def test_evidence_is_json_safe_and_rounded():
    import json

    f = run_rule("STEP_OUTLIERS", checkpoint_record())
    text = json.dumps(f.to_dict(), allow_nan=False)
    assert "NaN" not in text
    assert dataclasses.is_dataclass(f)


def test_float64_images_are_priced_as_uint8_shipped_and_normalized_in_the_step():
    """An N x 3 x H x W float64 batch is an image batch: the fix ships uint8 (1/8 of the bytes) and
    normalizes in the step; a Dataset without transforms is one stage, ``load``, and it is the one
    that does the float math, so it counts as a float stage."""
    n, c, h, w = 32, 3, 64, 64
    cfg = healthy_config(batch=[TensorInfo("batch[0]", "float64", [n, c, h, w], "cpu", n * c * h * w * 8),
                                TensorInfo("batch[1]", "int64", [n], "cpu", n * 8)],
                         param_dtypes={"float32": 1_000_000})
    per_worker = (STEPS * BATCH) // 2
    workers = [worker(i, per_worker, 1500.0, 1300.0, stages={"load": (900.0, 800.0), "collate": (600.0, 500.0)})
               for i in range(2)]
    f = run_rule("BATCH_DTYPE", healthy_record(config=cfg, workers=workers))
    assert f is not None
    assert "uint8" in f.title and "x.float() / 255.0" in f.fix
    ev = f.evidence
    assert ev["float_stage_share_of_loading"] == pytest.approx(1.0)
    assert ev["load_cpu_s_per_step_after"] == pytest.approx(ev["load_cpu_s_per_step"] / 8, rel=1e-3)
    # The normalize the step takes on costs more than the cast it drops (29 vs 12 bytes an element).
    assert ev["normalize_s_per_step_after"] == pytest.approx(ev["cast_s_per_step"] * 29 / 12, rel=1e-3)
    # Tabular float64 (2-D) keeps the float32 fix.
    tab = run_rule("BATCH_DTYPE", healthy_record(config=f64_config("float32"), workers=workers))
    assert tab is not None and "astype(np.float32)" in tab.fix and "uint8" not in tab.title


def test_float64_batches_from_workers_save_the_first_touch_of_their_pages():
    # The delivery probe read a received batch 3 ms slower the first time (mapping the worker's
    # shared memory); float32 ships half the bytes, so half of that goes for the float64 share.
    base = healthy_record(config=f64_config("float32"))
    touched = healthy_record(config=f64_config("float32"), probes=probes(delivery_touch_s=0.003))
    f, g = run_rule("BATCH_DTYPE", base), run_rule("BATCH_DTYPE", touched)
    assert f is not None and g is not None
    f64_share = (32 * 256 * 8) / (32 * 256 * 8 + 256)
    assert f.evidence["first_touch_saved_s_per_step"] == 0.0
    assert g.evidence["first_touch_saved_s_per_step"] == pytest.approx(0.003 * f64_share * 0.5, rel=1e-3)
    assert g.est_speedup > f.est_speedup
    # Main-process loading ships nothing through shared memory: nothing to save.
    loader = healthy_loader(num_workers=0, persistent_workers=False, prefetch_factor=None)
    main = healthy_record(config=dataclasses.replace(f64_config("float32"), loaders=[loader]),
                          probes=probes(delivery_touch_s=0.003),
                          workers=[worker(-1, STEPS * BATCH, 1500.0, 1300.0)])
    h = run_rule("BATCH_DTYPE", main)
    assert h is None or h.evidence["first_touch_saved_s_per_step"] == 0.0


def test_on_a_quiet_machine_extra_threads_are_never_priced_faster():
    from stave.analyze.step_inputs import MACHINE_BUSY_MIN_CORES, oversubscription_penalty

    # The elementwise half read 0.2 (the oversized pool 5x faster): on cores no other process uses
    # that is the probe disturbed, and it counts as no gain (1.0), not as a loss of the fix.
    rec, summary, parallel, gemm = _penalty_case(0.2)
    quiet = oversubscription_penalty(rec, summary, 2.25e-3, 0.0)
    assert quiet == pytest.approx(parallel / (gemm / 1.2 + (parallel - gemm) / 1.0), rel=1e-3)
    # Beside another busy process more threads can win a larger share of the cores: kept as read.
    busy = oversubscription_penalty(rec, summary, 2.25e-3, MACHINE_BUSY_MIN_CORES * 4)
    assert busy == pytest.approx(parallel / (gemm / 1.2 + (parallel - gemm) / 0.2), rel=1e-3)
    assert busy < 1.0 < quiet
    # Unknown other load: as read (no claim about the machine is made).
    assert oversubscription_penalty(rec, summary, 2.25e-3) == pytest.approx(busy)


def test_python_overhead_beside_busy_processes_is_a_share_of_the_jobs_own_step():
    """Beside a process holding one of two cores, the parallel ops' barrier waits swell forward and
    backward (python_token_loop beside a hog: backward 67-90 against 22 ms alone), so the loop's Python
    is under 15 % of the measured step; of the step the busy-threads probe measured at the free
    core (which a quiet machine at least matches) it is over, as it is on the quiet machine."""
    steps = make_steps(lambda i: {"data_wait": 2.0, "forward": 40.0, "backward": 60.0, "optimizer": 3.0,
                                  "other": 15.0})
    rec = loop_record(other_ops=20)
    rec.steps = steps
    rec.stacks = stack_profile(steps, {"other": [(55, 1.0)]}, interval_ms=2.0)
    quiet = dataclasses.replace(rec, config=dataclasses.replace(rec.config, cores_usable=2, cores_total=2,
                                                                torch_threads=2),
                                run=dataclasses.replace(rec.run, cores_usable=2, cores_total=2))
    assert run_rule("PYTHON_OVERHEAD", quiet) is None  # 15 of 120 ms, and nobody else on the cores
    busy = dataclasses.replace(quiet, host=host_series(steps, cpu_main_pct=100.0, cpu_workers_pct=None,
                                                       workers_alive=0, cpu_system_pct=100.0),
                               probes=probes(busy_threads_speedup=4.0, busy_threads_elementwise_speedup=8.0,
                                             busy_threads_probe=[2, 1]))
    assert run_rule("MACHINE_BUSY", busy) is not None
    f = run_rule("PYTHON_OVERHEAD", busy)
    assert f is not None
    assert f.evidence["own_step_time_s"] < f.evidence["step_time_s"] == pytest.approx(0.120, rel=0.01)
    assert f.evidence["python_s_removed"] / f.evidence["own_step_time_s"] >= 0.15
    # The same run without the probe: no measured floor, the measured step, nothing said.
    bare = dataclasses.replace(busy, probes=probes(busy_threads_probe=[]))
    assert run_rule("PYTHON_OVERHEAD", bare) is None
