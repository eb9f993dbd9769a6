"""Planted bottleneck: six loader workers with a heavy PIL pipeline beside torch's threads (expect CPU_CONTENTION).

The loader was given ``num_workers=6`` (a value copied from a bigger machine) and each worker runs a
per-sample PIL pipeline (random resized crop, Gaussian blur, colour jitter). The data wait stays
small, because six workers keep the queue full, but they and torch's intra-op threads want more
cores than the machine has: every op of the step waits for a core.

``--fixed``: one worker per spare core (``cores - 1``, at least one; ``--fixed-workers N``: N), the split that leaves torch
its cores; the same transforms, the same training.
``--fixed --fixed-threads N``: the other split, ``torch.set_num_threads(N)`` beside the same workers.
``--fixed --fixed-batch-transforms 1``: the third split, the same workers and threads with the blur, colour
jitter and normalization applied to the collated batch in the loop (one torch op per batch; the jitter's
factors are then drawn per batch, not per sample); the workers only crop.
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
from torchvision.transforms import v2


class RandomImages(Dataset):
    def __init__(self, count: int, size: int, transform) -> None:
        rng = np.random.default_rng(0)
        self.images = rng.integers(0, 256, size=(count, size, size, 3), dtype=np.uint8)
        self.labels = rng.integers(0, 10, size=count)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        return self.transform(Image.fromarray(self.images[i])), int(self.labels[i])


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], workers=6, batch_size=32, width=32, fixed_workers=0, fixed_threads=0,
                       fixed_batch_transforms=0)
    torch.manual_seed(0)
    tf = transforms.Compose([
        transforms.RandomResizedCrop(64), transforms.GaussianBlur(5, sigma=1.5), transforms.ColorJitter(0.3, 0.3, 0.3),
        transforms.ToTensor(), transforms.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25)),
    ])
    batch_tf = None
    if args.fixed and args.fixed_batch_transforms:
        tf = transforms.Compose([transforms.RandomResizedCrop(64), transforms.PILToTensor()])
        batch_tf = v2.Compose([
            v2.ToDtype(torch.float32, scale=True), v2.GaussianBlur(5, sigma=1.5), v2.ColorJitter(0.3, 0.3, 0.3),
            v2.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25)),
        ])
    cores = len(os.sched_getaffinity(0))
    # --fixed-threads N: the other split the doctor may name, fewer intra-op threads beside the same workers.
    spare = args.workers if args.fixed_threads or batch_tf is not None else max(1, cores - 1)
    workers = (args.fixed_workers or spare) if args.fixed else args.workers
    if args.fixed and args.fixed_threads:
        torch.set_num_threads(args.fixed_threads)
    loader = DataLoader(RandomImages(1024, 96, tf), batch_size=args.batch_size, shuffle=True, num_workers=workers,
                        persistent_workers=True, prefetch_factor=4)
    w = args.width
    model = nn.Sequential(
        nn.Conv2d(3, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(w, 2 * w, 3, padding=1), nn.BatchNorm2d(2 * w), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(2 * w, 4 * w, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * w, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        for images, labels in loader:
            if batch_tf is not None:
                images = batch_tf(images)
            with cpu_autocast():
                loss = nn.functional.cross_entropy(model(images), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            timer.step(images.shape[0])
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
