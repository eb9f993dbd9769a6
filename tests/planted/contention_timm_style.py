"""Planted bottleneck: a timm-style train loop with ``-j 8`` workers and RandAugment (expect CPU_CONTENTION).

Written like timm's ``train.py``: an argparse ``--workers``/``-j`` default of 8, a torchvision
ResNet-18 built without pretrained weights, RandAugment + random erasing per sample in the
workers, SGD with Nesterov momentum, a cosine schedule. On a machine with few cores the eight
workers' augmentation competes with the trainer's threads for the same cores.

``--fixed``: ``-j 1`` (one worker per spare core; ``--fixed-workers N``: N); everything else the same.
``--fixed --fixed-threads N``: the other split, ``torch.set_num_threads(N)`` beside the same workers.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from _timing import StepTimer, cpu_autocast, planted_args
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision import models, transforms


class FakeImageFolder(Dataset):
    def __init__(self, count: int, transform) -> None:
        rng = np.random.default_rng(1)
        self.images = [Image.fromarray(a) for a in rng.integers(0, 256, (count, 80, 80, 3), dtype=np.uint8)]
        self.targets = rng.integers(0, 100, size=count)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int):
        return self.transform(self.images[i]), int(self.targets[i])


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], workers=8, batch_size=32, img_size=64, fixed_workers=0, fixed_threads=0)
    torch.manual_seed(0)
    train_tf = transforms.Compose([
        transforms.RandomResizedCrop(args.img_size), transforms.RandomHorizontalFlip(),
        transforms.RandAugment(num_ops=2, magnitude=9), transforms.ToTensor(),
        transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)), transforms.RandomErasing(0.25),
    ])
    # --fixed-threads N: the other split the doctor may name, fewer intra-op threads beside the same workers.
    spare = args.workers if args.fixed_threads else max(1, len(os.sched_getaffinity(0)) - 1)
    workers = (args.fixed_workers or spare) if args.fixed else args.workers
    if args.fixed and args.fixed_threads:
        torch.set_num_threads(args.fixed_threads)
    loader = DataLoader(FakeImageFolder(512, train_tf), batch_size=args.batch_size, shuffle=True,
                        num_workers=workers, persistent_workers=True, drop_last=True)
    model = models.resnet18(num_classes=100)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=2e-5)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(args.steps, 1))
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
    timer = StepTimer(args.steps, args.warmup)
    model.train()
    while not timer.done:
        for input, target in loader:
            with cpu_autocast():
                output = model(input)
                loss = loss_fn(output, target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            timer.step(input.shape[0])
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
