"""Rung plans: what each rung proposes, and why it skips, for a given job and machine."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import tiny_job
from stave import device as dev
from stave.bench import rungs as R
from stave.bench.settings import RunConfig
from stave.train.config import TrainConfig


def context(spec=None, quick: bool = False, cap: int = 1 << 20, image_inputs: bool = True) -> R.Context:
    return R.Context(spec or tiny_job.spec(), torch.device("cpu"), quick, image_inputs, lambda _c: cap)


def test_workers_counts_up_to_the_usable_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dev, "usable_cores", lambda: 4)
    plan = R.plan_workers(context(), RunConfig(64))
    assert plan.mode == "grow" and [c[1]["num_workers"] for c in plan.candidates] == [1, 2, 4]
    assert R.plan_workers(context(), RunConfig(64, num_workers=4)).skip


def test_gpu_only_rungs_skip_on_a_cpu_with_the_reason() -> None:
    for plan in (R.plan_pin_memory, R.plan_cuda_graphs, R.plan_cudnn_benchmark):
        assert "no GPU" in plan(context(), RunConfig(64)).skip


def test_batch_size_doubles_up_to_the_smallest_cap() -> None:
    plan = R.plan_batch_size(context(cap=300), RunConfig(64))
    assert [c[1]["batch_size"] for c in plan.candidates] == [128, 256]  # 1024 samples x 0.25 = 256
    quick = R.plan_batch_size(context(quick=True), RunConfig(64))
    assert [c[1]["batch_size"] for c in quick.candidates] == [128, 256]
    assert "already at the cap" in R.plan_batch_size(context(cap=64), RunConfig(64)).skip


def test_uint8_needs_a_uint8_dataset() -> None:
    assert R.plan_uint8(context(), RunConfig(64)).candidates[0][1] == {"uint8": True}
    no_uint8 = dataclasses.replace(tiny_job.spec(), uint8_dataset=None)
    assert "no uint8 variant" in R.plan_uint8(context(no_uint8), RunConfig(64)).skip


def test_set_to_none_only_when_the_job_passes_false() -> None:
    assert "already set_to_none=True" in R.plan_set_to_none(context(), RunConfig(64)).skip
    plan = R.plan_set_to_none(context(), RunConfig(64, train=TrainConfig(set_to_none=False)))
    assert plan.candidates[0][1] == {"set_to_none": True}


def test_autocast_follows_the_hardware(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(R, "best_precision", lambda _d: ("bf16", "native"))
    assert R.plan_autocast(context(), RunConfig(64)).candidates[0][1] == {"precision": "bf16"}
    monkeypatch.setattr(R, "best_precision", lambda _d: (None, "this CPU has no native bf16"))
    assert R.plan_autocast(context(), RunConfig(64)).skip == "this CPU has no native bf16"


def test_channels_last_needs_convolutions_and_pairs_with_autocast() -> None:
    assert "no 2-D convolutions" in R.plan_channels_last(context(image_inputs=False), RunConfig(64)).skip
    rung = next(r for r in R.default_rungs(tiny_job.spec()) if r.name == "channels_last")
    assert rung.pairs_with == ("autocast",)


def test_optimizer_and_compile_plans() -> None:
    plan = R.plan_optimizer(context(), RunConfig(64))
    assert plan.mode == "best" and [c[1]["optimizer_impl"] for c in plan.candidates] == ["foreach", "fused"]
    assert "--quick" in R.plan_compile(context(quick=True), RunConfig(64)).skip
    assert R.plan_compile(context(), RunConfig(64)).candidates[0][1] == {"compile": True}


def test_default_rungs_follow_the_issue_order_with_custom_loaders_after_uint8() -> None:
    from stave.bench.spec import CustomLoader

    spec = dataclasses.replace(tiny_job.spec(), loaders=(CustomLoader("fast", lambda r: []),))
    names = [r.name for r in R.default_rungs(spec)]
    assert names == [
        "workers",
        "pin_memory",
        "batch_size",
        "uint8",
        "loader:fast",
        "set_to_none",
        "autocast",
        "channels_last",
        "batch_size_again",
        "optimizer",
        "compile",
        "cuda_graphs",
        "cudnn_benchmark",
        "input_again",
    ]


def test_input_pipeline_is_retried_only_when_the_faster_step_waits_for_data(monkeypatch: pytest.MonkeyPatch) -> None:
    from stave.bench.result import KEPT, REVERTED, RungResult, Trial
    from stave.bench.spec import CustomLoader

    monkeypatch.setattr(dev, "usable_cores", lambda: 2)
    spec = dataclasses.replace(tiny_job.spec(), loaders=(CustomLoader("fast", lambda r: []),))
    base = RunConfig(64)
    faster = RunConfig(64, train=TrainConfig(precision="bf16"))

    def ctx_with(wait: float) -> R.Context:
        ctx = context(spec)
        ctx.results["workers"] = RungResult("workers", "w", REVERTED, "no gain")
        ctx.results["loader:fast"] = RungResult("loader:fast", "l", REVERTED, "no gain")
        kept = Trial("autocast bf16", {"precision": "bf16"}, faster, data_wait_share=wait)
        ctx.results["autocast"] = RungResult("autocast", "a", KEPT, "1.8x", [kept], kept)
        return ctx

    plan = R.plan_input_again(ctx_with(0.13), faster)
    assert plan.mode == "best"
    assert [c[1].get("num_workers", c[1].get("loader")) for c in plan.candidates] == [1, "fast"]
    assert "under 5%" in R.plan_input_again(ctx_with(0.02), faster).skip
    # Nothing kept at all: the pipeline was already judged on this configuration.
    assert "no rung was kept" in R.plan_input_again(context(spec), base).skip
    # A batch-size rung kept after the workers rung multiplies the loading per step: retried too.
    bigger = RunConfig(1024)
    ctx = context(spec)
    ctx.results["workers"] = RungResult("workers", "w", REVERTED, "no gain")
    kept = Trial("batch 1024", {"batch_size": 1024}, bigger, data_wait_share=0.93)
    ctx.results["batch_size"] = RungResult("batch_size", "b", KEPT, "1.3x", [kept], kept)
    assert R.plan_input_again(ctx, bigger).mode == "best"
    # Without another loader to try, worker counts are climbed while each doubling helps.
    monkeypatch.setattr(dev, "usable_cores", lambda: 16)
    ctx.spec = tiny_job.spec()
    plan = R.plan_input_again(ctx, bigger)
    assert plan.mode == "grow" and [c[1]["num_workers"] for c in plan.candidates] == [1, 2, 4, 8, 16]
