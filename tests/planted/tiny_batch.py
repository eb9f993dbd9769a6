"""Planted bottleneck: a batch of 2 samples (expect SMALL_BATCH).

Each step pays costs that do not depend on the batch: Adam updating 16 parameter tensors one by
one, the dispatch of every op in forward and backward, and the loader's per-batch overhead. With 2
samples per step those fixed costs are most of the step.

``--fixed``: a batch of 32 (16x; ``--fixed-batch-size N``: N): where this model's fixed costs (about 1 ms a step) fall to about a
tenth of the step (about 0.3 ms of matmuls a sample at the small-GEMM rate of a 2-core EPYC), which
is the batch the doctor names from its measurements (a further doubling then gains under 5 %).
"""

from __future__ import annotations

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=200, fixed_batch_size=32)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    dataset = TensorDataset(torch.randn(4096, 256, generator=gen), torch.randint(0, 10, (4096,), generator=gen))
    loader = DataLoader(dataset, batch_size=args.fixed_batch_size if args.fixed else 2, shuffle=True)
    layers: list[nn.Module] = []
    for _ in range(7):
        layers += [nn.Linear(256, 256), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(256, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
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
