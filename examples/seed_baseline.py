"""Seed 002's baseline training loop, as a plain PyTorch script (no stave inside).

ResNet-18 on a fake CIFAR dataset of uint8 arrays, decoded through PIL with per-sample
Resize + ToTensor + Normalize, batch 32, ``num_workers=0``, SGD (momentum 0.9, lr 0.001).
Images are resized to 64 px by default; ``--size 224`` is the seed's original.

Run it plainly (``python examples/seed_baseline.py``) or under the doctor
(``stave doctor examples/seed_baseline.py``). ``stave demo`` runs it; ``stave bench ladder
--workload seed-resnet18`` climbs the optimization ladder from the same definitions.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torchvision
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


class FakeCIFAR(Dataset):
    """CIFAR-shaped samples: 32x32 RGB uint8 arrays and labels, drawn once from a private generator."""

    def __init__(self, num_samples: int = 5000, num_classes: int = 10, transform=None, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.images = rng.integers(0, 256, size=(num_samples, 32, 32, 3), dtype=np.uint8)
        self.labels = rng.integers(0, num_classes, size=num_samples).astype(np.int64)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        image = Image.fromarray(self.images[index])
        if self.transform is not None:
            image = self.transform(image)
        return image, int(self.labels[index])


def build_transform(size: int = 64) -> transforms.Compose:
    """The seed's per-sample pipeline: PIL resize, float conversion, normalization, all on the CPU."""
    return transforms.Compose(
        [transforms.Resize(size), transforms.ToTensor(), transforms.Normalize(CIFAR_MEAN, CIFAR_STD)]
    )


def build_model(num_classes: int = 10) -> nn.Module:
    """ResNet-18 from torchvision, randomly initialized."""
    return torchvision.models.resnet18(num_classes=num_classes)


def build_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    """SGD with momentum 0.9 and lr 0.001, as in the seed."""
    return torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64, help="image side after Resize (seed original: 224)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--samples", type=int, default=5000, help="size of the fake dataset")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-every", type=int, default=20)
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dataset = FakeCIFAR(args.samples, transform=build_transform(args.size), seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    model = build_model().to(device)
    optimizer = build_optimizer(model)
    criterion = nn.CrossEntropyLoss()

    model.train()
    start = time.perf_counter()
    seen = 0
    for epoch in range(args.epochs):
        for step, (images, labels) in enumerate(loader):
            images, labels = images.to(device), labels.to(device)
            outputs = model(images)
            loss = criterion(outputs, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen += images.shape[0]
            if step % args.log_every == 0:
                rate = seen / (time.perf_counter() - start)
                print(f"epoch {epoch} step {step} loss {loss.item():.4f} {rate:.1f} samples/s")


if __name__ == "__main__":
    main()
