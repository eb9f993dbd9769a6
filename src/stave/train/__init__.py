"""stave.train: the optimized training step, short enough to read and usable on its own.

>>> from stave.train import TrainConfig, build_step
>>> step = build_step(model, lambda m: torch.optim.SGD(m.parameters(), lr=0.1), nn.CrossEntropyLoss(),
...                   TrainConfig(precision="bf16", channels_last=True, optimizer_impl="foreach"))
>>> for images, labels in loader:
...     loss = step(images.to(step.device), labels.to(step.device))   # a device tensor: no sync

:func:`train_step` is the step itself (autocast, zero_grad(set_to_none), backward, optimizer
update, GradScaler for fp16); :func:`build_step` applies the configuration once (device,
channels_last, foreach/fused optimizer, torch.compile, CUDA graphs, cudnn.benchmark).
:func:`snippet` writes a configuration as plain PyTorch code. docs/train.md has the details.
"""

from __future__ import annotations

from stave.train.config import TrainConfig
from stave.train.optim import current_impl, supported_impls, with_impl
from stave.train.precision import best_precision
from stave.train.snippet import snippet
from stave.train.step import TrainStep, autocast_context, build_step, train_step

__all__ = [
    "TrainConfig",
    "TrainStep",
    "autocast_context",
    "best_precision",
    "build_step",
    "current_impl",
    "snippet",
    "supported_impls",
    "train_step",
    "with_impl",
]
