"""Planted bottleneck: ``total_loss += loss`` keeps every step's autograd graph (expect MEMORY_GROWTH).

The running loss is accumulated as a tensor. Each addition records an autograd node that points at
this step's loss, whose graph points at all of this step's nodes: no step's graph is ever freed.
The backward call passes ``retain_graph=True`` (as code adapted from a two-loss example often
does), so each kept graph also keeps its saved activations: host memory grows by megabytes every
step until the process is killed. Without ``retain_graph`` the same leak keeps only the graph's
nodes, tens of KiB per step, which takes a long run to see. Otherwise the script is healthy
(bf16 autocast where the CPU has native bf16, data in memory).

``--fixed``: ``total_loss += loss.item()`` keeps a Python float instead.
"""

from __future__ import annotations

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=100)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    dataset = TensorDataset(torch.randn(8192, 512, generator=gen), torch.randint(0, 10, (8192,), generator=gen))
    loader = DataLoader(dataset, batch_size=64, shuffle=True)
    blocks: list[nn.Module] = []
    for _ in range(8):
        blocks += [nn.Linear(512, 512), nn.LayerNorm(512), nn.GELU()]
    model = nn.Sequential(*blocks, nn.Linear(512, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    timer = StepTimer(args.steps, args.warmup)
    total_loss = 0.0
    while not timer.done:
        for x, y in loader:
            with cpu_autocast():
                loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward(retain_graph=True)
            optimizer.step()
            if args.fixed:
                total_loss += loss.item()
            else:
                total_loss += loss  # the leak: a tensor with autograd history
            timer.step(x.shape[0])
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
