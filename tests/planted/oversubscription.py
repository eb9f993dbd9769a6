"""Planted bottleneck: far more torch threads than cores (expect THREAD_OVERSUBSCRIPTION).

The script sets ``torch.set_num_threads(8 * cores)``, as a config copied from a bigger machine (or
``OMP_NUM_THREADS=64`` in a container limited to a few cores) does. Every op is split into that
many chunks whose threads then queue for the few cores, and each op's barrier waits for the last
of them. The model already trains in bf16 autocast where the CPU has native bf16, so threads are its only planted problem.

``--fixed``: one thread per usable core.
"""

from __future__ import annotations

import os

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    args = planted_args(__doc__.splitlines()[0])
    cores = len(os.sched_getaffinity(0))
    torch.set_num_threads(cores if args.fixed else 8 * cores)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    dataset = TensorDataset(torch.randn(4096, 512, generator=gen), torch.randint(0, 10, (4096,), generator=gen))
    loader = DataLoader(dataset, batch_size=128, shuffle=True)
    model = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.LayerNorm(1024), nn.Linear(1024, 1024), nn.GELU(),
                          nn.Linear(1024, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        for x, y in loader:
            with cpu_autocast():
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
