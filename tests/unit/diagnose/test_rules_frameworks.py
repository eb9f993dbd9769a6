"""PADDING_WASTE, OPTIMIZER_UNFUSED, EVAL_OVERHEAD, attention findings, framework-native fixes,
and PYTHON_OVERHEAD's narrowing to Python that is really in the loop."""

from __future__ import annotations

import dataclasses

import pytest

from stave.analyze.breakdown import summarize_steps
from stave.diagnose import framework_fixes as ff
from stave.diagnose.rules import attention, evaluation, optimizer, padding, python_loop
from stave.measure import FrameKey, OptimizerInfo
from synth_records import (
    SCRIPT,
    healthy_config,
    healthy_record,
    host_series,
    make_steps,
    run_rule,
    stack_profile,
)

# --- PADDING_WASTE ---------------------------------------------------------------------------------


def lm_record(width: int = 128, lengths=(16, 24, 32, 40), longest_rows: int | None = None, attn_q: float = 0.2):
    """Steps of 4 rows padded to ``width`` with the given real lengths; attention ``attn_q`` of FLOPs."""
    steps = make_steps()
    rows = len(lengths)
    longest = max(lengths)
    for s in steps:
        s.tokens = rows * width
        s.real_tokens = sum(lengths)
        s.longest_tokens = rows * longest
        s.token_sq = rows * width * width
        s.real_token_sq = sum(n * n for n in lengths)
        s.longest_token_sq = rows * longest * longest
    rec = healthy_record(steps=steps)
    flops = {"forward": int(1e10), "backward": int(2e10)}
    rec.config = healthy_config(flops_by_phase=flops,
                                attention_flops_by_phase={k: int(v * attn_q) for k, v in flops.items()},
                                aten_ops_by_phase={"forward": 10, "backward": 10, "optimizer": 10, "other": 5})
    return rec


def test_padding_share_and_estimate_follow_the_formula():
    rec = lm_record(lengths=(32, 36, 38, 40))
    f = run_rule("PADDING_WASTE", rec)
    assert f is not None
    sums = padding.TokenSums(512, 146, 160, 4 * 128 ** 2, 32 ** 2 + 36 ** 2 + 38 ** 2 + 40 ** 2, 4 * 40 ** 2)
    left_longest = padding.compute_share_left(sums, 0.2, sums.longest, sums.longest_sq)
    left_all = padding.compute_share_left(sums, 0.2, sums.real, sums.real_sq)
    assert f.evidence["pad_share_of_tokens"] == pytest.approx(1 - 146 / 512, rel=1e-3)
    # padded to the longest gives most of the speedup: the one-line fix is chosen
    assert f.evidence["fix_strategy"] == "longest"
    # Rows of 16 to 40 tokens: pad-to-longest saves 73% of the compute against grouping's 81%, but
    # that is 3.3x against 4.6x: grouping by length is named.
    assert run_rule("PADDING_WASTE", lm_record()).evidence["fix_strategy"] == "group_by_length"
    s = summarize_steps(rec.steps)
    t = s.step_time_median_s
    compute = (s.breakdown["forward"] + s.breakdown["backward"]) * t - 20 * 3000e-9
    closed_form = t / (t - compute * (1 - left_longest))
    # Priced by the step model: the fewer tokens shrink forward+backward as in the closed form, but the
    # loader's workers still have to feed each step, so the gain can only fall short of it, not pass it.
    assert 1.5 < f.est_speedup <= closed_form * 1.01
    assert "DataCollatorWithPadding" in f.fix


def test_padding_mixed_lengths_already_at_longest_asks_for_grouping():
    # Padded only to each batch's longest, but one long row per batch: grouping by length is the fix.
    f = run_rule("PADDING_WASTE", lm_record(width=128, lengths=(8, 8, 8, 128)))
    assert f is not None and f.evidence["fix_strategy"] == "group_by_length"
    assert "DataCollatorWithFlattening" not in f.fix
    rec = lm_record(width=128, lengths=(8, 8, 8, 128))
    rec.config.attn_implementation = "flash_attention_2"
    assert "DataCollatorWithFlattening" in run_rule("PADDING_WASTE", rec).fix


def test_padding_prices_attention_by_its_share_of_the_op_time_where_timed():
    # A CPU run whose counted step timed its ops: attention took 60% of forward+backward's op time
    # for 20% of the FLOPs (softmax and mask over the squared rows count no FLOPs). Padding's squared
    # rows then weigh more: the estimate grows, and the evidence shows both shares.
    flops_only = run_rule("PADDING_WASTE", lm_record(width=128, lengths=(8, 8, 8, 128)))
    rec = lm_record(width=128, lengths=(8, 8, 8, 128))
    rec.config.op_s_by_phase = {"forward": {"product": 0.004, "autocast_fp32": 0.006},
                                "backward": {"product": 0.008, "autocast_fp32": 0.012}}
    rec.config.attention_op_s_by_phase = {"forward": 0.006, "backward": 0.012}
    timed = run_rule("PADDING_WASTE", rec)
    assert timed.evidence["attention_share_of_time"] == pytest.approx(0.6)
    assert timed.evidence["attention_share_of_flops"] == pytest.approx(0.2, rel=1e-3)
    assert flops_only.evidence["attention_share_of_time"] is None
    sums = padding._sums(type("I", (), {"record": rec})())
    left = padding.compute_share_left(sums, 0.6, sums.real, sums.real_sq)
    assert timed.evidence["compute_saved_share_no_padding"] == pytest.approx(1 - left, abs=1e-4)  # rounded
    assert timed.est_speedup > flops_only.est_speedup


def test_padding_quiet_without_padding_or_tokens():
    assert run_rule("PADDING_WASTE", lm_record(width=32, lengths=(32, 32, 30, 32))) is None
    assert run_rule("PADDING_WASTE", healthy_record()) is None


def test_attention_share_weighs_the_quadratic_part():
    sums = padding.TokenSums(tokens=100, real=50, longest=100, sq=1000, real_sq=250, longest_sq=1000)
    assert padding.compute_share_left(sums, 0.0, 50, 250) == pytest.approx(0.5)
    assert padding.compute_share_left(sums, 1.0, 50, 250) == pytest.approx(0.25)


# --- OPTIMIZER_UNFUSED -----------------------------------------------------------------------------


def opt_record(foreach=None, fused=None, device="cpu", optimizer_ms=30.0, ops=2000):
    steps = make_steps(lambda i: {"data_wait": 2.0, "forward": 30.0, "backward": 34.0, "optimizer": optimizer_ms,
                                  "other": 4.0})
    rec = healthy_record(steps=steps)
    rec.config = healthy_config(device_type=device, optimizers=[OptimizerInfo("AdamW", 1_000_000, 150, foreach, fused)],
                                aten_ops_by_phase={"forward": 300, "backward": 450, "optimizer": ops, "other": 30})
    return rec


def test_unfused_optimizer_estimate_from_ops_at_the_measured_dispatch_cost():
    f = run_rule("OPTIMIZER_UNFUSED", opt_record())
    assert f is not None
    opt_s = f.evidence["optimizer_s"]
    expected_opt = max(opt_s - (2000 - 4) * 3000e-9, opt_s * optimizer.MIN_TIME_LEFT)
    assert f.evidence["fused_optimizer_s"] == pytest.approx(expected_opt, rel=1e-3)
    assert "fused=True" in f.fix and "AdamW" in f.fix


# optimizer_ms=2.0: 2.7 % of the step, so even a fused update that kept only MIN_TIME_LEFT of it
# saves under the report bar.
@pytest.mark.parametrize("changes", [dict(fused=True), dict(optimizer_ms=2.0), dict(ops=0),
                                     dict(foreach=None, device="cuda", ops=20)])
def test_optimizer_quiet(changes):
    assert run_rule("OPTIMIZER_UNFUSED", opt_record(**changes)) is None


def test_optimizer_under_a_tenth_of_the_step_is_named_when_its_fix_clears_the_bar():
    # 5 ms of a 75 ms step (6.7 %): no share floor; 2000 ops at 3 us go, a fifth of it stays: 1.057x.
    f = run_rule("OPTIMIZER_UNFUSED", opt_record(optimizer_ms=5.0))
    assert f is not None and f.evidence["optimizer_share"] < 0.10
    assert 1.05 <= f.est_speedup < 1.06


def test_is_unfused_by_device_defaults():
    loop = OptimizerInfo("AdamW", 1, 1, None, None)
    assert optimizer.is_unfused(loop, gpu=False) and optimizer.is_unfused(loop, gpu=True)
    assert not optimizer.is_unfused(OptimizerInfo("LBFGS", 1, 1, None, None), gpu=False)
    assert not optimizer.is_unfused(OptimizerInfo("AdamW", 1, 1, None, True), gpu=True)


# --- EVAL_OVERHEAD ---------------------------------------------------------------------------------


def test_eval_overhead_from_the_wall_share():
    steps = make_steps()
    for s in steps[::2]:
        s.eval_ns = 150_000_000
        s.end_ns += s.eval_ns
        s.eval_forwards = 10
    rec = healthy_record(steps=steps)
    summary = summarize_steps(rec.steps)
    assert summary.step_time_median_s == pytest.approx(0.1, rel=0.05)  # evaluation left out
    f = run_rule("EVAL_OVERHEAD", rec)
    assert f is not None
    share = summary.eval_share
    assert 0.3 < share < 0.5
    # Every 2nd step evaluates; the interval named is where evaluation is at most the target share
    # of the wall (from the 1-2-5 series), and the estimate prices exactly that interval.
    every = f.evidence["eval_interval_steps_after"]
    assert f.evidence["eval_interval_steps"] == pytest.approx(2.0)
    r = every / 2.0
    assert (share / r) / (1 - share + share / r) <= evaluation.EVAL_TARGET_SHARE
    assert f"step % {every} == 0" in f.fix
    assert f.est_speedup == pytest.approx(1 / (1 - share * (1 - 1 / r)), rel=1e-3)
    # Removing evaluation altogether would gain at most REPORT_MIN_SPEEDUP more than the named interval.
    assert 1 / (1 - share) / f.est_speedup < 1.05 + 1e-9
    assert run_rule("EVAL_OVERHEAD", healthy_record()) is None


def test_eval_overhead_prices_the_first_evaluation_as_the_later_ones():
    # The first evaluation pays one-time costs (new shapes' kernels, the loader's first iterator):
    # 200 ms against 15 ms for each later one; evaluating more rarely saves the later ones' cost.
    steps = make_steps()
    with_eval = [s for s in steps if s.counted][::5]
    for i, s in enumerate(with_eval):
        s.eval_ns = 200_000_000 if i == 0 else 15_000_000
        s.end_ns += s.eval_ns
    rec = healthy_record(steps=steps)
    evals = [s.eval_ns for s in rec.counted_steps() if s.eval_ns > 0]
    assert len(evals) >= 3 and max(evals) == 200_000_000
    train = sum(s.duration_ns for s in rec.counted_steps())
    steady = 15_000_000 * len(evals) / (train + 15_000_000 * len(evals))
    assert evaluation.steady_eval_share(rec.counted_steps()) == pytest.approx(steady)
    assert summarize_steps(rec.steps).eval_share > steady
    f = run_rule("EVAL_OVERHEAD", rec)
    assert f is None or f.evidence["eval_share_of_wall"] == pytest.approx(steady)
    # One evaluation alone stands as measured.
    first = with_eval[0]
    assert evaluation.steady_eval_share([first]) == pytest.approx(0.2 / (0.2 + first.duration_ns / 1e9))


def test_eval_interval_from_the_1_2_5_series():
    assert [evaluation.nice_at_least(v) for v in (0.5, 1, 3, 5, 7, 11, 200, 201, 999)] == \
        [1, 1, 5, 5, 10, 20, 200, 500, 1000]
    # A small share needs a small stretch; a large one a large stretch.
    assert evaluation.target_interval(0.25, 10) < evaluation.target_interval(0.8, 10)


# --- attention -------------------------------------------------------------------------------------


def test_eager_attention_with_its_flop_share():
    rec = lm_record(attn_q=0.3)
    rec.config.attn_implementation = "eager"
    f = run_rule("ATTENTION_EAGER", rec)
    assert f is not None and 'attn_implementation="sdpa"' in f.fix
    assert f.evidence["attention_share_of_flops"] == pytest.approx(0.3, rel=1e-3)
    rec.config.attn_implementation = "sdpa"
    assert run_rule("ATTENTION_EAGER", rec) is None


def test_sdpa_backend_and_reasons():
    assert attention.sdpa_backend({"scaled_dot_product_flash_attention_for_cpu": 2}, 2) == "flash"
    assert attention.sdpa_backend({"scaled_dot_product_efficient_attention": 2}, 2) == "memory_efficient"
    assert attention.sdpa_backend({}, 4) == "math"
    assert attention.sdpa_backend({}, 0) is None
    reasons = attention.slow_kernel_reasons({"dtype": "float32", "attn_mask": "bool", "head_dim": "300"})
    assert len(reasons) == 3 and "float32" in reasons[0]
    assert attention.slow_kernel_reasons({"dtype": "bfloat16", "attn_mask": "none", "head_dim": "64"}) == []


def test_slow_kernel_only_on_gpu_math_path():
    rec = lm_record(attn_q=0.3)
    rec.config.sdpa_calls = 8
    rec.config.sdpa_inputs = {"dtype": "float32", "attn_mask": "none", "head_dim": "64"}
    assert run_rule("ATTENTION_SLOW_KERNEL", rec) is None  # CPU
    rec.config.device_type = "cuda"
    f = run_rule("ATTENTION_SLOW_KERNEL", rec)
    assert f is not None and "float32" in f.title
    rec.config.sdpa_kernels = {"scaled_dot_product_flash_attention": 8}
    assert run_rule("ATTENTION_SLOW_KERNEL", rec) is None


# --- framework-native fixes ------------------------------------------------------------------------


@pytest.mark.parametrize("framework,text", [
    ("lightning", 'precision="bf16-mixed"'), ("hf_trainer", "bf16=True"),
    ("accelerate", 'mixed_precision="bf16"'), ("timm", "--amp --amp-dtype bfloat16"),
])
def test_mixed_precision_fix_in_each_framework(framework, text):
    finding = run_rule("OPTIMIZER_UNFUSED", opt_record())
    finding = dataclasses.replace(finding, id="NO_MIXED_PRECISION")
    cfg = healthy_config(framework=framework)
    [out] = ff.apply_framework_fixes([finding], cfg)
    assert text in out.fix
    [same] = ff.apply_framework_fixes([finding], healthy_config())
    assert same.fix == finding.fix  # plain PyTorch: the rule's own code


def test_padding_fix_names_the_installed_transformers_switch():
    finding = run_rule("PADDING_WASTE", lm_record())
    v5 = healthy_config(framework="hf_trainer", framework_options={"group_by_length": "train_sampling_strategy"})
    v4 = healthy_config(framework="hf_trainer", framework_options={"group_by_length": "group_by_length"})
    assert 'train_sampling_strategy="group_by_length"' in ff.apply_framework_fixes([finding], v5)[0].fix
    assert "group_by_length=True" in ff.apply_framework_fixes([finding], v4)[0].fix


def test_worker_fix_uses_the_rules_suggestion():
    finding = dataclasses.replace(run_rule("OPTIMIZER_UNFUSED", opt_record()), id="DATA_CPU_BOUND",
                                  evidence={"suggested_workers": 6})
    assert "dataloader_num_workers=6" in ff.framework_fix(finding, healthy_config(framework="hf_trainer"))
    assert "--workers 6" in ff.framework_fix(finding, healthy_config(framework="timm"))


def test_every_table_entry_renders():
    for (finding_id, framework), _text in ff.FIXES.items():
        finding = dataclasses.replace(run_rule("OPTIMIZER_UNFUSED", opt_record()), id=finding_id)
        text = ff.framework_fix(finding, healthy_config(framework=framework))
        assert text and "{" not in text.replace("{}", "")


# --- PYTHON_OVERHEAD narrowing ---------------------------------------------------------------------


def library_record(tmp_path, other_ops: int, line_text: str):
    """'other' is 45 ms at one line whose samples are inside a library function."""
    script = tmp_path / "train.py"
    script.write_text("for step in range(10):\n    loss.backward()\n    " + line_text + "\n    opt.step()\n")
    steps = make_steps(lambda i: {"data_wait": 2.0, "forward": 20.0, "backward": 30.0, "optimizer": 3.0, "other": 45.0})
    rec = healthy_record(steps=steps)
    rec.config = healthy_config(aten_ops_by_phase={"forward": 100, "backward": 150, "other": other_ops})
    prof = stack_profile(steps, {"other": [(3, 1.0)]}, interval_ms=2.0)
    prof.frames = [FrameKey(str(script), 3, "<module>", True), FrameKey("/site-packages/torch/nn/utils/clip_grad.py",
                                                                      80, "clip_grad_norm_", False)]
    prof.stacks = [[0, 1] for _ in prof.stacks]  # every sample: the script's line, inside clip_grad_norm_
    rec.stacks = prof
    return rec


def test_library_call_doing_cpp_work_is_not_python_overhead(tmp_path):
    # 45 ms over 100 ops: 450 us per op, 150 dispatches each: the work is inside the library.
    line = "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
    assert run_rule("PYTHON_OVERHEAD", library_record(tmp_path, 100, line)) is None
    # The same line issuing thousands of tiny ops (a few dispatches each) is Python overhead.
    f = run_rule("PYTHON_OVERHEAD", library_record(tmp_path, 5000, line))
    assert f is not None and "per-element" not in f.fix and "clip_grad_norm_" in f.fix


def test_a_loss_computed_once_per_step_is_not_python_overhead(tmp_path):
    # The polynomial fit of pytorch/examples: the loss and its .item() outside any loop, 18 cheap ops
    # between the phases. No rewrite removes a loss, and on a CPU .item() waits for nothing.
    line = "output = F.smooth_l1_loss(fc(batch_x), batch_y); loss = output.item(); output.backward()"
    rec = library_record(tmp_path, 18, line)
    rec.stacks.stacks = [[0] for _ in rec.stacks.stacks]  # the samples on the script's line itself
    rec.probes.op_overhead_ns = 1e6  # each op a dispatch or two: the line's ops are cheap, not C++ work
    assert run_rule("PYTHON_OVERHEAD", rec) is None
    # The same line issuing thousands of ops (a call that loops inside) is named.
    rec.config.aten_ops_by_phase["other"] = 5000
    assert run_rule("PYTHON_OVERHEAD", rec) is not None
    # A comprehension or generator over the batch, or a print every step, is removable Python.
    for removable in ("loss = sum(F.mse_loss(o, t) for o, t in zip(out, y))", 'print(f"loss {loss}")'):
        assert python_loop.removable_line(removable, False, gpu=False, other_ops=18), removable
    assert python_loop.removable_line("total += loss.item()", False, gpu=True, other_ops=3)
    assert not python_loop.removable_line("total += loss.item()", False, gpu=False, other_ops=3)
    assert not python_loop.logs("logits = model(x); loss = F.log_softmax(logits, -1)")


def test_fix_text_fits_the_line(tmp_path):
    assert "per-element" in python_loop.line_fix("a.py:3", "loss = loss + F.mse_loss(o[i], y[i])", True)
    assert "every N steps" in python_loop.line_fix("a.py:3", "total += loss.item()", False)
    assert "log every N" in python_loop.line_fix("a.py:3", 'print(f"{loss}")', False)
    src = tmp_path / "t.py"
    src.write_text("for batch in loader:\n    out = model(batch)\n    for i in range(8):\n"
                   "        loss = loss + f(out[i])\n    loss.backward()\n    opt.step()\n")
    from stave.analyze.hotlines import source_context

    assert source_context(str(src), 4) == ("loss = loss + f(out[i])", True)
    assert source_context(str(src), 2) == ("out = model(batch)", False)  # the training loop itself
    assert source_context(str(tmp_path / "gone.py"), 2) == ("", False)


def test_ops_do_work_needs_both_counts():
    assert python_loop.ops_do_work(0.045, 100, 3000.0)
    assert not python_loop.ops_do_work(0.045, 5000, 3000.0)
    assert not python_loop.ops_do_work(0.045, None, 3000.0) and not python_loop.ops_do_work(0.045, 100, None)


def test_unfused_optimizer_estimate_from_the_fused_probe():
    rec = opt_record()
    rec.probes.optimizer_fused_ratio = 2.0
    f = run_rule("OPTIMIZER_UNFUSED", rec)
    assert f is not None and "2.00x" in f.title
    assert f.evidence["fused_optimizer_s"] == pytest.approx(f.evidence["optimizer_s"] / 2, rel=1e-3)
    # Measured here, fused is no faster (a loaded CPU): no finding, whatever the op count says.
    rec.probes.optimizer_fused_ratio = 0.6
    assert run_rule("OPTIMIZER_UNFUSED", rec) is None


def test_per_token_cost_is_fitted_when_tokens_vary():
    # 2 ms fixed + 10 us per token, widths varying step to step (dynamic padding)
    tokens = [256 + 64 * (i % 5) for i in range(20)]
    compute = [0.002 + 1e-5 * t for t in tokens]
    assert padding.fitted_token_s(tokens, compute) == pytest.approx(1e-5, rel=1e-6)
    assert padding.fitted_token_s([512] * 20, [0.01] * 20) is None  # fixed-length padding: no fit
    assert padding.fitted_token_s(tokens[:4], compute[:4]) is None


def test_unfused_optimizer_names_the_fastest_probed_implementation():
    rec = opt_record()
    rec.probes.optimizer_fused_ratio, rec.probes.optimizer_foreach_ratio = 0.8, 1.6  # fused slower here
    f = run_rule("OPTIMIZER_UNFUSED", rec)
    assert f is not None and f.evidence["best_implementation"] == "foreach"
    assert "foreach=True" in f.fix and "fused=True" not in f.fix
    assert f.evidence["fused_optimizer_s"] == pytest.approx(f.evidence["optimizer_s"] / 1.6, rel=1e-3)
    timm = ff.framework_fix(f, healthy_config(framework="timm"))
    assert "--opt-kwargs foreach=True" in timm
    # Neither is faster on this machine: no finding, whatever the op count says.
    rec.probes.optimizer_fused_ratio, rec.probes.optimizer_foreach_ratio = 0.9, 0.7
    assert run_rule("OPTIMIZER_UNFUSED", rec) is None
    assert optimizer.best_implementation(None, None) is None
    assert optimizer.best_implementation(1.5, 1.5) == ("fused", 1.5)


def test_eager_attention_priced_from_the_probe_at_the_runs_shape():
    rec = lm_record(attn_q=0.3)
    rec.config.attn_implementation = "eager"
    rec.config.attention_geometry = [4, 8, 64, 1]
    rec.config.forward_calls_per_step = 1.0
    rec.probes.attention_eager_s, rec.probes.attention_sdpa_s = 0.004, 0.001
    rec.probes.attention_probe = [8, 8, 512, 64]
    f = run_rule("ATTENTION_EAGER", rec)
    assert f is not None and "4.00x faster per call" in f.title
    assert f.evidence["saved_s_per_step"] == pytest.approx(4 * 0.003)
    assert f.evidence["attention_calls_per_step"] == 4
    # SDPA no faster at this shape on this machine: no finding, whatever the FLOP share says.
    rec.probes.attention_eager_s, rec.probes.attention_sdpa_s = 0.001, 0.0011
    assert run_rule("ATTENTION_EAGER", rec) is None


def test_probed_attention_saving_never_exceeds_forward_and_backward():
    assert attention.probed_attention_saving_s(1.0, 0.1, 10, 2.0) == 2.0
    assert attention.probed_attention_saving_s(0.1, 0.2, 10, 2.0) == 0.0


# --- tokens/s and MFU ------------------------------------------------------------------------------


def test_tokens_per_second_and_mfu_from_the_counted_flops():
    from stave.analyze.mfu import model_flops_utilization

    rec = lm_record()
    summary = summarize_steps(rec.steps)
    t = summary.step_time_median_s
    assert summary.tokens_per_step == 512 and summary.real_tokens_per_step == 112
    assert summary.real_tokens_per_s == pytest.approx(summary.tokens_per_s * 112 / 512)
    rec.probes.fp32_matmul_flops_per_s = 1e12
    util = model_flops_utilization(rec, summary)
    assert util.flops_per_step == int(3e10) and util.peak_source.startswith("measured")
    assert util.mfu == pytest.approx(3e10 / t / 1e12)
    rec.probes.fp32_matmul_flops_per_s = None  # a CPU run without the probe: no peak, no MFU
    assert model_flops_utilization(rec, summary) is None


def test_a_whole_tensor_line_is_not_python_in_the_loop():
    """``x = x.float()`` of a large batch is one op doing C++ work; loops, read-backs and logging
    are Python the fix text can address."""
    assert python_loop.is_whole_tensor_line("x = x.float()", False)
    assert not python_loop.is_whole_tensor_line("loss = loss + F.mse_loss(o[i], y[i])", True)
    assert not python_loop.is_whole_tensor_line("total += loss.item()", False)
    assert not python_loop.is_whole_tensor_line('print(f"{loss}")', False)
    assert not python_loop.is_whole_tensor_line("", False)


def per_sample_loop_record(tmp_path, loop_share: float, outlier_every: int = 0):
    """'other' is 45 ms a step (135 ms every ``outlier_every``-th step), ``loop_share`` of its
    samples on a line inside a per-sample loop, the rest on one line outside it; 4000 ops there."""
    script = tmp_path / "train.py"
    script.write_text("for batch in loader:\n    out = model(batch)\n    for i in range(len(y)):\n"
                      "        loss = loss + f(out[i:i + 1], y[i:i + 1])\n    log(step)\n")

    def phases(i: int) -> dict[str, float]:
        other = 135.0 if outlier_every and i % outlier_every == outlier_every - 1 else 45.0
        return {"data_wait": 2.0, "forward": 20.0, "backward": 30.0, "optimizer": 3.0, "other": other}

    steps = make_steps(phases)
    rec = healthy_record(steps=steps)
    rec.probes.fp32_matmul_flops_per_s = 1e12
    rec.config = healthy_config(aten_ops_by_phase={"forward": 100, "backward": 4150, "other": 4000})
    prof = stack_profile(steps, {"other": [(4, loop_share), (5, 1.0 - loop_share)]}, interval_ms=1.0)
    prof.frames = [FrameKey(str(script), 4 if f.line == 4 else 5, "<module>", True) for f in prof.frames]
    rec.stacks = prof
    return rec


def test_a_per_sample_loop_is_priced_by_its_op_counts_not_its_sample_share(tmp_path):
    # The loop's line holds 60% of the few stack samples; the op counts (4000 ops, backward replaying
    # 3850 nodes beyond the model's) show a loop over the batch: the rewrite removes all of it.
    few = run_rule("PYTHON_OVERHEAD", per_sample_loop_record(tmp_path, 0.6))
    whole = run_rule("PYTHON_OVERHEAD", per_sample_loop_record(tmp_path, 1.0))
    assert few is not None and whole is not None
    assert few.evidence["hot_line_in_inner_loop"] is True
    assert few.evidence["python_s_removed"] == pytest.approx(0.045, rel=0.01)
    assert few.est_speedup == pytest.approx(whole.est_speedup, rel=0.01)


def test_a_loops_saving_is_its_share_of_the_models_mean_phase(tmp_path):
    # Every 10th step's 'other' is three times longer (the loop's garbage collections): the median
    # 'other' is 45 ms, the mean 54 ms. The loop removed is all of 'other' in the model either way,
    # so the estimate over the median step is the same share of it as without the long steps.
    steady = run_rule("PYTHON_OVERHEAD", per_sample_loop_record(tmp_path, 1.0))
    bursty = run_rule("PYTHON_OVERHEAD", per_sample_loop_record(tmp_path, 1.0, outlier_every=10))
    assert steady is not None and bursty is not None
    assert bursty.est_speedup == pytest.approx(steady.est_speedup, rel=0.05)


def test_unfused_optimizer_beside_busy_processes_is_priced_at_the_probes_own_time():
    """Beside a process holding one of two cores, each op of a per-tensor loop waits at the pool's
    barrier for the thread sharing a core with it (python_token_loop beside a busy loop: 130 ms of
    optimizer a step, 3.6 ms alone). The probe timed the run's own loop at the free core, beside them:
    that is the optimizer's time there, and the fix is priced on the step at the free cores."""
    steps = make_steps(lambda i: {"data_wait": 2.0, "forward": 60.0, "backward": 120.0, "optimizer": 130.0,
                                  "other": 4.0})
    rec = opt_record()
    rec.steps = steps
    rec.config = dataclasses.replace(rec.config, cores_usable=2, cores_total=2, torch_threads=2)
    rec.run = dataclasses.replace(rec.run, cores_usable=2, cores_total=2)
    rec.host = host_series(steps, cpu_main_pct=100.0, cpu_workers_pct=None, workers_alive=0, cpu_system_pct=100.0)
    rec.probes = dataclasses.replace(rec.probes, busy_threads_speedup=2.0, busy_threads_elementwise_speedup=3.0,
                                     busy_threads_probe=[2, 1], optimizer_fused_ratio=4.0, optimizer_probe_threads=1,
                                     optimizer_probe=[150, 1_000_000])
    swollen = run_rule("OPTIMIZER_UNFUSED", rec)  # no own time kept (an older record): as measured
    assert swollen is not None and swollen.est_speedup > 1.3
    assert swollen.evidence["optimizer_s_at_free_cores"] is None
    rec.probes.optimizer_own_step_s = 0.004  # 4 ms at the free core
    assert run_rule("OPTIMIZER_UNFUSED", rec) is None  # 4 ms -> 1 ms of a step of ~100 ms: under the bar
    rec.probes.optimizer_own_step_s = 0.040
    f = run_rule("OPTIMIZER_UNFUSED", rec)
    assert f is not None and f.evidence["optimizer_s_at_free_cores"] == pytest.approx(0.040)
    assert f.evidence["fused_optimizer_s_at_free_cores"] == pytest.approx(0.010)
    assert 1.05 <= f.est_speedup < swollen.est_speedup
    # Probed at the script's own threads (no other process took cores): the measured phase as before.
    rec.probes.optimizer_probe_threads = 2
    assert run_rule("OPTIMIZER_UNFUSED", rec).est_speedup == pytest.approx(swollen.est_speedup)
