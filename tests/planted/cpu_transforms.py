"""Planted bottleneck: CPU-heavy per-sample transforms in the main process (expect DATA_CPU_BOUND).

Images are decoded through PIL and augmented per sample (a large random-resized crop, a Gaussian
blur, colour jitter), with ``num_workers=0``: the training loop stops at every batch while the
main process does all of that on one core. The blur is the most expensive stage.

``--fixed``: one loader worker per usable core (``--fixed-workers N``: N), persistent, so loading runs alongside the compute.
``--fixed --fixed-drop-stage NAME``: the loading as written (main process) without the transform
``NAME``: what the doctor prices when it names a stage to make cheaper (that stage costing nothing,
an upper bound), where workers would not pay on the machine.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from _timing import StepTimer, cpu_autocast, planted_args
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms


class ImageArrays(Dataset):
    """uint8 RGB images held in memory, decoded into PIL images and transformed per sample."""

    def __init__(self, count: int, transform) -> None:
        rng = np.random.default_rng(0)
        self.images = rng.integers(0, 256, size=(count, 80, 80, 3), dtype=np.uint8)
        self.labels = rng.integers(0, 10, size=count)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        return self.transform(Image.fromarray(self.images[index])), int(self.labels[index])


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], fixed_workers=0, fixed_drop_stage="")
    torch.manual_seed(0)
    stages = [
        transforms.RandomResizedCrop(64),
        transforms.GaussianBlur(kernel_size=5, sigma=2.0),
        transforms.ColorJitter(0.4, 0.4, 0.4),
        transforms.ToTensor(),
        transforms.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25)),
    ]
    drop = args.fixed_drop_stage if args.fixed else ""
    if drop and drop not in {type(t).__name__ for t in stages}:
        raise SystemExit(f"--fixed-drop-stage {drop}: no such stage")
    transform = transforms.Compose([t for t in stages if type(t).__name__ != drop])
    dataset = ImageArrays(2048, transform)
    cores = len(os.sched_getaffinity(0))
    if args.fixed and not drop:
        extra = {"num_workers": args.fixed_workers or cores, "persistent_workers": True}
    else:
        extra = {"num_workers": 0}
    loader = DataLoader(dataset, batch_size=16, shuffle=True, **extra)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(32 * 16, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        for x, y in loader:
            with cpu_autocast():
                loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            timer.step(x.shape[0])
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
