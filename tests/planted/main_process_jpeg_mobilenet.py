"""Planted control: JPEG decoding in the main process beside a MobileNet that fills the cores (expect no finding about the job).

A torchvision-reference-style loop: JPEG bytes decoded by PIL in ``__getitem__``, then
RandomResizedCrop, flip, ToTensor and Normalize in a ``Compose``, ``num_workers=0``, and
``mobilenet_v3_small`` at 112 px whose two compute threads keep both cores busy. The step waits
for data about a third of its time, yet a loader worker only moves that work onto the cores the
compute's parallel ops need: on a 2-core machine it measured 0.97-0.99x.

``--fixed``: one persistent loader worker per usable core less one, at least one
(``--fixed-workers N``: N), which is what DATA_CPU_BOUND would advise.
"""

from __future__ import annotations

import io
import os

import numpy as np
import torch
import torchvision
from _timing import StepTimer, cpu_autocast, planted_args
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms as T


class JpegImages(Dataset):
    """Encoded photos held in memory (as files read ahead would be), decoded per sample."""

    def __init__(self, count: int, size: int, transform: T.Compose) -> None:
        rng = np.random.default_rng(0)
        self.blobs = []
        for _ in range(16):
            base = rng.integers(0, 256, (size // 8, size // 8, 3), dtype=np.uint8)
            img = Image.fromarray(base).resize((size, size), Image.BILINEAR)
            buf = io.BytesIO()
            img.save(buf, format="JPEG", quality=90)
            self.blobs.append(buf.getvalue())
        self.count = count
        self.transform = transform

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int):
        img = Image.open(io.BytesIO(self.blobs[i % len(self.blobs)])).convert("RGB")
        return self.transform(img), i % 10


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=30, size=320, crop=112, batch_size=32, fixed_workers=0)
    torch.manual_seed(0)
    transform = T.Compose([T.RandomResizedCrop(args.crop), T.RandomHorizontalFlip(), T.ToTensor(),
                           T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    workers = max(1, len(os.sched_getaffinity(0)) - 1)
    loader_kw = ({"num_workers": args.fixed_workers or workers, "persistent_workers": True} if args.fixed else {})
    loader = DataLoader(JpegImages(512, args.size, transform), batch_size=args.batch_size, shuffle=True,
                        **loader_kw)
    model = torchvision.models.mobilenet_v3_small(num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
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
