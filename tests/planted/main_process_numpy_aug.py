"""Planted bottleneck: numpy augmentation in the main process, ``num_workers=0`` (expect DATA_CPU_BOUND).

A dataset of float32 volumes whose ``__getitem__`` applies random flips, a random 3D crop, a
gamma correction and a Gaussian-like smoothing (three shifted sums) in numpy. With the default
``num_workers=0`` all of it runs in the training process, between steps: the model waits.

``--fixed``: one persistent worker per usable core (``--fixed-workers N``: N), so loading overlaps the step.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Volumes(Dataset):
    def __init__(self, count: int, side: int) -> None:
        rng = np.random.default_rng(0)
        self.vols = rng.random((count, side, side, side), dtype=np.float32)
        self.labels = rng.integers(0, 4, size=count)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        rng = np.random.default_rng(i)
        v = self.vols[i]
        if rng.random() < 0.5:
            v = v[::-1]
        c = v.shape[0] - 8
        a, b, d = rng.integers(0, 8, size=3)
        v = v[a : a + c, b : b + c, d : d + c]
        v = np.power(v, rng.uniform(0.7, 1.5))
        v = (v + np.roll(v, 1, 0) + np.roll(v, 1, 1) + np.roll(v, 1, 2)) / 4.0
        return torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32))[None], int(self.labels[i])


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=30, side=40, batch_size=16, fixed_workers=0)
    torch.manual_seed(0)
    workers = ({"num_workers": args.fixed_workers or len(os.sched_getaffinity(0)), "persistent_workers": True}
               if args.fixed else {})
    loader = DataLoader(Volumes(256, args.side), batch_size=args.batch_size, shuffle=True, **workers)
    model = nn.Sequential(nn.Conv3d(1, 8, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool3d(2), nn.Flatten(),
                          nn.Linear(64, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
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
