"""Planted bottleneck: each step's outputs kept for later metrics, graph and all (expect MEMORY_GROWTH).

The loop appends ``outputs`` (the logits, still attached to the autograd graph) to a list to
compute an epoch-level metric later. Each kept tensor holds its graph, and ``retain_graph=True``
(copied from a two-loss example) keeps the graph's saved activations: memory grows every step.

``--fixed``: ``history.append(outputs.detach())`` and no ``retain_graph``.
"""

from __future__ import annotations

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=100, batch_size=64, hidden=512)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(8192, 256, generator=gen), torch.randint(0, 10, (8192,), generator=gen))
    # Whole batches by one index (no per-sample fetch): the data path is not what this script plants.
    loader = DataLoader(data, batch_size=None, sampler=BatchSampler(RandomSampler(data), args.batch_size, drop_last=False))
    model = nn.Sequential(nn.Linear(256, args.hidden), nn.GELU(), nn.Linear(args.hidden, args.hidden), nn.GELU(),
                          nn.Linear(args.hidden, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    history: list[torch.Tensor] = []
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        for x, y in loader:
            with cpu_autocast():
                outputs = model(x)
                loss = nn.functional.cross_entropy(outputs, y)
            opt.zero_grad()
            loss.backward(retain_graph=not args.fixed)
            opt.step()
            history.append(outputs.detach() if args.fixed else outputs)
            timer.step(x.shape[0])
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
