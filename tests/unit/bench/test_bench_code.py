"""The final configuration as code: it runs when pasted next to a model, a dataset and a loss."""

from __future__ import annotations

import torch
from torch import nn

import tiny_job
from stave.bench.code import tune_code
from stave.bench.settings import RunConfig


def run(code: str, dataset) -> dict:
    torch.manual_seed(0)
    namespace = {"torch": torch, "model": tiny_job.model(), "device": torch.device("cpu"),
                 "criterion": nn.CrossEntropyLoss(), "dataset": dataset}
    exec(compile(code, "<tune>", "exec"), namespace)
    return namespace


def test_code_for_uint8_bf16_channels_last_runs_and_normalizes_on_the_device() -> None:
    spec = tiny_job.spec()
    base = RunConfig(64)
    final = base.with_changes(batch_size=256, uint8=True, precision="bf16", channels_last=True, optimizer_impl="foreach")
    code = tune_code(spec, base, final, image_inputs=True)
    assert "batch_size=256" in code and "scale the learning rate" in code
    assert "uint8 CHW tensors" in code and "(inputs.float() - mean) / std" in code
    assert "torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)" in code
    namespace = run(code, tiny_job.TinyImages(uint8=True))
    assert namespace["inputs"].dtype == torch.float32
    assert namespace["inputs"].is_contiguous(memory_format=torch.channels_last)
    # Normalized on the device: uniform pixels (mean 0.5, sd 0.29 in [0, 1]) end near mean 0.1, sd 1.15.
    inputs = namespace["inputs"]
    assert abs(float(inputs.mean())) < 0.3 and 0.9 < float(inputs.std()) < 1.4


def test_code_when_nothing_helped_keeps_the_job_as_it_is() -> None:
    spec = tiny_job.spec()
    base = RunConfig(64)
    code = tune_code(spec, base, base, image_inputs=True)
    assert "no rung helped measurably" in code and "autocast" not in code
    run(code, tiny_job.TinyImages())


def test_code_for_workers_uses_persistent_workers() -> None:
    base = RunConfig(64)
    code = tune_code(tiny_job.spec(), base, base.with_changes(num_workers=2), image_inputs=True)
    assert "num_workers=2, persistent_workers=True" in code
