"""Planted bottleneck on a GPU: per-sample PIL augmentation in the main process (expect DATA_CPU_BOUND).

A ResNet-18 at 64 px in bf16 needs a few milliseconds of GPU time for a batch of 256; loading that
batch with ``num_workers=0`` (decode into PIL, a random-resized crop, a flip, colour jitter,
ToTensor and Normalize, one sample at a time on one core) takes far longer, and the GPU idles
while the main process does it.

``--fixed``: DataLoader workers, persistent and pinned (8, or ``--fixed-workers N``), so batches
are built while the GPU computes.
"""

from __future__ import annotations

import numpy as np
import torch
import torchvision
from _timing import StepTimer, device_autocast, device_sync, planted_args, planted_device
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms


class ImageArrays(Dataset):
    """uint8 RGB images held in memory, made into PIL images and transformed per sample."""

    def __init__(self, count: int, size: int, transform) -> None:
        rng = np.random.default_rng(0)
        self.images = rng.integers(0, 256, size=(count, size, size, 3), dtype=np.uint8)
        self.labels = rng.integers(0, 100, size=count)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        return self.transform(Image.fromarray(self.images[index])), int(self.labels[index])


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=20, batch_size=256, fixed_workers=8)
    device = planted_device()
    torch.backends.cudnn.benchmark = True
    transform = transforms.Compose([
        transforms.RandomResizedCrop(64, scale=(0.35, 1.0)),
        transforms.RandomHorizontalFlip(),
        transforms.ColorJitter(0.3, 0.3, 0.3),
        transforms.ToTensor(),
        transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    ])
    dataset = ImageArrays(4096, 96, transform)
    workers = args.fixed_workers if args.fixed else 0
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, drop_last=True, num_workers=workers,
                        persistent_workers=workers > 0, pin_memory=device.type == "cuda")
    model = torchvision.models.resnet18(num_classes=100).to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
    criterion = nn.CrossEntropyLoss()
    timer = StepTimer(args.steps, args.warmup, sync=device_sync(device))
    while not timer.done:
        for x, y in loader:
            x = x.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
            y = y.to(device, non_blocking=True)
            with device_autocast(device):
                loss = criterion(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            timer.step(x.shape[0])
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
