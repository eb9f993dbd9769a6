"""JobSpec validation, RunConfig plumbing and --job loading."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

import tiny_job
from stave.bench.settings import RunConfig
from stave.bench.spec import spec_from
from stave.bench.workloads import build_workload, load_job
from stave.errors import UsageError


def test_spec_validation_names_the_bad_field() -> None:
    good = tiny_job.spec()
    with pytest.raises(UsageError, match="batch_size must be a positive int"):
        dataclasses.replace(good, batch_size=0)
    with pytest.raises(UsageError, match="fewer than one batch"):
        dataclasses.replace(good, batch_size=5000)
    with pytest.raises(UsageError, match="both mean and std"):
        dataclasses.replace(good, std=None)
    with pytest.raises(UsageError, match="std values must be > 0"):
        dataclasses.replace(good, std=(0.2, 0.0, 0.2))
    with pytest.raises(UsageError, match="model must be callable"):
        dataclasses.replace(good, model=nn.Linear(2, 2).weight)
    with pytest.raises(UsageError, match="unit must be one of"):
        dataclasses.replace(good, unit="images")


def test_spec_from_a_dict_and_its_errors() -> None:
    spec = spec_from(tiny_job.as_dict(), "tiny_job:as_dict")
    assert spec.name == "tiny_job:as_dict" and spec.batch_size == 32
    with pytest.raises(UsageError, match="unknown spec fields \\['lr'\\]"):
        spec_from({**tiny_job.as_dict(), "lr": 0.1}, "x")
    with pytest.raises(UsageError, match="without optimizer"):
        spec_from({k: v for k, v in tiny_job.as_dict().items() if k != "optimizer"}, "x")
    with pytest.raises(UsageError, match="must return a stave.bench.JobSpec or a dict, got int"):
        spec_from(42, "x")


def test_load_job_reports_each_mistake_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    assert load_job("tiny_job:spec").name == "tiny"
    with pytest.raises(UsageError, match="MODULE:FUNCTION"):
        load_job("tiny_job")
    with pytest.raises(UsageError, match="cannot import 'no_such_module_xyz'"):
        load_job("no_such_module_xyz:spec")
    with pytest.raises(UsageError, match="has no function 'nope'"):
        load_job("tiny_job:nope")
    with pytest.raises(UsageError, match="got int"):
        load_job("tiny_job:not_a_spec")
    with pytest.raises(UsageError, match="unknown workload 'resnet-9000'"):
        build_workload("resnet-9000")


def test_run_config_routes_train_fields_and_reports_changes() -> None:
    base = RunConfig(32)
    changed = base.with_changes(batch_size=64, precision="bf16", channels_last=True)
    assert changed.batch_size == 64 and changed.train.precision == "bf16" and changed.train.channels_last
    assert changed.changes_from(base) == {"batch_size": 64, "precision": "bf16", "channels_last": True}
    assert hash(changed) == hash(base.with_changes(batch_size=64, precision="bf16", channels_last=True))
    with pytest.raises(UsageError):
        base.with_changes(batch_size=0)


def test_seed_workload_uses_the_seed_definitions() -> None:
    from stave_examples import seed_baseline as sb

    spec = build_workload("seed-resnet18", quick=True)
    assert spec.model is sb.build_model and spec.optimizer is sb.build_optimizer
    assert isinstance(spec.dataset, sb.FakeCIFAR) and spec.batch_size == 32 and spec.num_workers == 0
    image, label = spec.dataset[0]
    raw, raw_label = spec.uint8_dataset[0]
    assert raw.dtype == torch.uint8 and raw_label == label
    normalized = (raw.float() / 255 - torch.tensor(sb.CIFAR_MEAN).view(3, 1, 1)) / torch.tensor(sb.CIFAR_STD).view(
        3, 1, 1
    )
    torch.testing.assert_close(normalized, image, atol=1e-5, rtol=1e-5)


def test_gpt_workload_counts_tokens() -> None:
    spec = build_workload("gpt-char", quick=True)
    x, y = spec.dataset[0]
    assert spec.unit == "tokens" and spec.items_per_sample == x.shape[0]
    assert torch.equal(x[1:], y[:-1])  # targets are the inputs shifted by one character
    logits = spec.model()(x[None])
    assert logits.shape[-1] == spec.dataset.vocab_size
