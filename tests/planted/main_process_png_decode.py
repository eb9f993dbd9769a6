"""Planted bottleneck: PNG decoding in the main process (expect DATA_CPU_BOUND).

The dataset holds PNG-encoded images (as files read into memory would be) and decodes each one
with PIL in ``__getitem__``, then resizes it; ``num_workers=0``, so the decode runs between steps.

``--fixed``: one persistent worker per usable core (``--fixed-workers N``: N).
"""

from __future__ import annotations

import io
import os

import numpy as np
import torch
from _timing import StepTimer, cpu_autocast, planted_args
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import functional as TF


class PngImages(Dataset):
    def __init__(self, count: int, size: int) -> None:
        rng = np.random.default_rng(0)
        self.blobs = []
        for _ in range(count):
            # Smooth-ish content compresses like a photo; pure noise would not.
            base = rng.integers(0, 256, (size // 8, size // 8, 3), dtype=np.uint8)
            img = Image.fromarray(base).resize((size, size), Image.BILINEAR)
            buf = io.BytesIO()
            img.save(buf, format="PNG")
            self.blobs.append(buf.getvalue())
        self.labels = rng.integers(0, 10, size=count)

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, i: int):
        img = Image.open(io.BytesIO(self.blobs[i])).convert("RGB").resize((64, 64), Image.BICUBIC)
        return TF.to_tensor(img), int(self.labels[i])


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=30, size=256, batch_size=32, fixed_workers=0)
    torch.manual_seed(0)
    workers = ({"num_workers": args.fixed_workers or len(os.sched_getaffinity(0)), "persistent_workers": True}
               if args.fixed else {})
    loader = DataLoader(PngImages(256, args.size), batch_size=args.batch_size, shuffle=True, **workers)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        for x, y in loader:
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
