"""Planted control: a balanced input pipeline (expect no finding about the job).

uint8 images in memory, one persistent worker that only crops and flips (cheap), the batch cast
and normalized in float32 inside the step, a small conv net whose step is mostly compute. Data
arrive before they are needed, the workers use little CPU, the thread pools fit the cores.
``--fixed`` changes nothing (its ratio shows the noise floor).
"""

from __future__ import annotations

import numpy as np
import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import DataLoader, Dataset


class CroppedImages(Dataset):
    def __init__(self, count: int) -> None:
        rng = np.random.default_rng(0)
        self.images = torch.from_numpy(rng.integers(0, 256, (count, 3, 72, 72), dtype=np.uint8))
        self.labels = torch.from_numpy(rng.integers(0, 10, size=count))

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        top, left = (i * 7) % 8, (i * 3) % 8
        img = self.images[i, :, top : top + 64, left : left + 64]
        if i % 2:
            img = img.flip(-1)
        return img, self.labels[i]


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], batch_size=64, width=32)
    torch.manual_seed(0)
    loader = DataLoader(CroppedImages(2048), batch_size=args.batch_size, shuffle=True, num_workers=1,
                        persistent_workers=True)
    w = args.width
    model = nn.Sequential(
        nn.Conv2d(3, w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(w, 2 * w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(2 * w, 4 * w, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * w, 10),
    )
    mean = torch.tensor([127.5, 127.5, 127.5]).view(1, 3, 1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        for images, labels in loader:
            x = (images.float() - mean) / 64.0
            with cpu_autocast():
                loss = nn.functional.cross_entropy(model(x), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            timer.step(x.shape[0])
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
