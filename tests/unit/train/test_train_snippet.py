"""stave.train.snippet: the code it prints is valid Python that runs the configuration."""

from __future__ import annotations

import ast

import pytest
import torch
from torch import nn

from stave.train import TrainConfig, snippet
from stave.train.precision import best_precision
from stave import device as dev


def run_snippet(code: str) -> dict:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))
    images = torch.randint(0, 256, (4, 3, 8, 8), dtype=torch.uint8)
    namespace = {
        "torch": torch,
        "model": model,
        "device": torch.device("cpu"),
        "criterion": nn.CrossEntropyLoss(),
        "loader": [(images, torch.tensor([0, 1, 2, 0]))] * 2,
    }
    exec(compile(code, "<snippet>", "exec"), namespace)
    return namespace


def test_snippet_runs_bf16_channels_last_foreach_with_normalization() -> None:
    optimizer = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.001, momentum=0.9)
    code = snippet(
        TrainConfig(precision="bf16", channels_last=True, optimizer_impl="foreach"),
        optimizer=optimizer,
        normalize=((0.5, 0.5, 0.5), (0.25, 0.25, 0.25)),
    )
    assert "torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9, foreach=True)" in code
    assert "dtype=torch.bfloat16" in code and "channels_last" in code
    namespace = run_snippet(code)
    assert namespace["loss"].dtype == torch.float32
    assert namespace["optimizer"].param_groups[0]["foreach"] is True


def test_snippet_for_fp16_compile_and_graphs_is_valid_python() -> None:
    code = snippet(TrainConfig(precision="fp16", compile=True, cuda_graphs=True, cudnn_benchmark=True))
    ast.parse(code)
    assert "GradScaler" in code and "scaler.step(optimizer)" in code
    assert 'torch.compile(model, mode="reduce-overhead")' in code


def test_default_config_snippet_is_the_plain_loop() -> None:
    code = snippet(TrainConfig(set_to_none=False), image_inputs=False)
    assert "autocast" not in code and "channels_last" not in code
    assert "optimizer.zero_grad(set_to_none=False)" in code


def test_best_precision_follows_the_cpu_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dev, "cpu_has_native_bf16", lambda: True)
    assert best_precision("cpu")[0] == "bf16"
    monkeypatch.setattr(dev, "cpu_has_native_bf16", lambda: False)
    precision, why = best_precision("cpu")
    assert precision is None and "no native bf16" in why
