"""Planted bottleneck: per-sample numpy augmentation in four workers, competing with the step (expect CPU_CONTENTION).

A spectrogram-style dataset: each sample is a float32 array that ``__getitem__`` augments in numpy
(random gain, additive noise, a time shift, a frequency mask and a log compression), sample by
sample, in four workers. The queue keeps up, but the workers' numpy math takes cores the trainer's
intra-op threads need.

``--fixed``: the workers only slice raw arrays (one worker); the same augmentation is applied to
the whole batch in torch inside the step (batch-level transforms), which costs a fraction of the CPU.
"""

from __future__ import annotations

import numpy as np
import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import DataLoader, Dataset

BINS, FRAMES = 64, 256


class Spectrograms(Dataset):
    def __init__(self, count: int, augment: bool) -> None:
        rng = np.random.default_rng(0)
        self.x = rng.random((count, BINS, FRAMES), dtype=np.float32) + 0.01
        self.y = rng.integers(0, 10, size=count)
        self.augment = augment

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        x = self.x[i]
        if self.augment:
            rng = np.random.default_rng(i)
            x = x * rng.uniform(0.5, 1.5)
            x = x + rng.normal(0.0, 0.01, size=x.shape).astype(np.float32)
            x = np.roll(x, rng.integers(-16, 16), axis=1)
            start = rng.integers(0, BINS - 8)
            x[start : start + 8] = 0.0
            x = np.log1p(np.abs(x)) + np.sqrt(np.abs(x))
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), int(self.y[i])


def batch_augment(x: torch.Tensor) -> torch.Tensor:
    x = x * torch.empty(x.shape[0], 1, 1).uniform_(0.5, 1.5)
    x = x + 0.01 * torch.randn_like(x)
    x = torch.roll(x, int(torch.randint(-16, 16, ())), dims=2)
    start = int(torch.randint(0, BINS - 8, ()))
    x[:, start : start + 8] = 0.0
    return torch.log1p(x.abs()) + x.abs().sqrt()


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], workers=4, batch_size=64, hidden=512)
    torch.manual_seed(0)
    loader = DataLoader(Spectrograms(2048, augment=not args.fixed), batch_size=args.batch_size, shuffle=True,
                        num_workers=1 if args.fixed else args.workers, persistent_workers=True)
    model = nn.Sequential(nn.Flatten(), nn.Linear(BINS * FRAMES, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
    # Fused AdamW, the healthy setting: the default for-loop update of the 8.4M-parameter first layer
    # was a second bottleneck here (fused measured 1.50x on a 2-core EPYC, above the planted
    # contention's gain), and a planted script should plant one mechanism.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        for x, y in loader:
            if args.fixed:
                x = batch_augment(x)
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
