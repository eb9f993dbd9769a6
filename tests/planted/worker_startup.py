"""Planted bottleneck: loader workers restarted every short epoch (expect DATA_WORKER_STARTUP).

A small in-memory dataset gives epochs of four steps. With ``persistent_workers=False`` (the
default) every epoch shuts its two workers down and starts two new ones, and the first batch of
the next epoch waits for them: on Linux a fork of the whole training process plus the workers'
set-up; with the "spawn" start method (the default on macOS and Windows) a fresh interpreter that
imports torch, which costs seconds instead.

``--fixed``: ``persistent_workers=True`` keeps the workers across epochs.
"""

from __future__ import annotations

import torch
from _timing import StepTimer, planted_args
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    args = planted_args(__doc__.splitlines()[0])
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    dataset = TensorDataset(torch.randn(64, 256, generator=gen), torch.randint(0, 10, (64,), generator=gen))
    loader = DataLoader(dataset, batch_size=16, shuffle=True, num_workers=2, persistent_workers=args.fixed)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        for x, y in loader:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            timer.step(x.shape[0])
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
