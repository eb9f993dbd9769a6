"""Planted bottleneck: workers normalize images in float64 and ship them that way (expect BATCH_DTYPE).

``__getitem__`` turns a uint8 image into ``(img / 255.0 - mean) / std`` with numpy, whose default
float is float64: the worker's math runs in float64, collation copies 8 bytes per pixel, the batch
crosses shared memory at 8x the bytes of uint8, and the step casts it with ``.float()``.

``--fixed``: workers ship the uint8 crop; the step normalizes the batch in float32 (the same values).
"""

from __future__ import annotations

import numpy as np
import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import DataLoader, Dataset

MEAN = np.array([0.485, 0.456, 0.406]).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225]).reshape(3, 1, 1)


class Images(Dataset):
    def __init__(self, count: int, size: int, ship_uint8: bool) -> None:
        rng = np.random.default_rng(0)
        self.images = rng.integers(0, 256, (count, 3, size, size), dtype=np.uint8)
        self.labels = rng.integers(0, 10, size=count)
        self.ship_uint8 = ship_uint8

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        img = self.images[i]
        if self.ship_uint8:
            return torch.from_numpy(img), int(self.labels[i])
        return torch.from_numpy((img / 255.0 - MEAN) / STD), int(self.labels[i])  # float64


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], batch_size=64, size=96, workers=2)
    torch.manual_seed(0)
    loader = DataLoader(Images(1024, args.size, ship_uint8=args.fixed), batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers, persistent_workers=True)
    model = nn.Sequential(nn.Conv2d(3, 16, 5, stride=4), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    mean = torch.tensor(MEAN, dtype=torch.float32).view(1, 3, 1, 1)
    std = torch.tensor(STD, dtype=torch.float32).view(1, 3, 1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        for x, y in loader:
            if args.fixed:
                x = (x.float() / 255.0 - mean) / std
            else:
                x = x.float()
            with cpu_autocast():
                loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            timer.step(x.shape[0])
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
