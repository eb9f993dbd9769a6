"""A tiny job for the ladder's tests (also loadable as ``--job tiny_job:spec`` from this folder).

A conv stem with BatchNorm in front of two wide linear layers: bf16 autocast is clearly faster than
fp32 on a CPU with native bf16 (the matmuls dominate), and BatchNorm makes a dropped input
normalization subtle in the loss, which is what the planted rung needs.
"""

from __future__ import annotations

import functools

import torch
from torch import nn
from torch.utils.data import Dataset

from stave.bench.spec import JobSpec

MEAN = (0.49, 0.48, 0.45)
STD = (0.25, 0.24, 0.26)
SIDE = 16
# Hidden width: small for the unit tests' speed; the timed test passes a wider one so bf16's
# matmul advantage stands out of a loaded machine's noise.
WIDTH = 256


class TinyImages(Dataset):
    """Random uint8 images and labels; ``uint8`` False yields them normalized as float32."""

    def __init__(self, n: int = 1024, uint8: bool = False, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.images = torch.randint(0, 256, (n, 3, SIDE, SIDE), dtype=torch.uint8, generator=generator)
        self.labels = torch.randint(0, 10, (n,), generator=generator)
        self.uint8 = uint8
        self.mean = torch.tensor(MEAN).view(3, 1, 1)
        self.std = torch.tensor(STD).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image = self.images[index]
        if not self.uint8:
            image = (image.float() / 255 - self.mean) / self.std
        return image, self.labels[index]


def model(width: int = WIDTH) -> nn.Module:
    """Conv + BN stem, then matmul-heavy layers."""
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(8 * SIDE * SIDE, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, 10),
    )


def optimizer(net: nn.Module) -> torch.optim.Optimizer:
    """SGD with momentum."""
    return torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)


def spec(
    mean: tuple[float, ...] = MEAN, std: tuple[float, ...] = STD, batch_size: int = 64, width: int = WIDTH
) -> JobSpec:
    """The job; ``mean``/``std`` are what the uint8 rung normalizes with on the device."""
    return JobSpec(
        name="tiny",
        model=functools.partial(model, width),
        dataset=TinyImages(uint8=False),
        loss=nn.CrossEntropyLoss(),
        optimizer=optimizer,
        batch_size=batch_size,
        uint8_dataset=TinyImages(uint8=True),
        mean=mean,
        std=std,
        description="tiny conv+linear net on random 16 px images",
    )


def planted_spec(width: int = WIDTH) -> JobSpec:
    """The planted bug: the uint8 variant is scaled to [0, 1] but never normalized."""
    return spec(mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), width=width)


def as_dict() -> dict:
    """The same job as a plain dict (the other form ``--job`` accepts)."""
    return {
        "model": model,
        "dataset": TinyImages(),
        "loss": nn.CrossEntropyLoss(),
        "optimizer": optimizer,
        "batch_size": 32,
    }


def not_a_spec() -> int:
    """A job function that returns the wrong thing."""
    return 42
