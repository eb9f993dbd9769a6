"""Planted bottleneck: a tiny model trained at batch 2 (expect SMALL_BATCH).

A two-layer MLP on 32 features with ``batch_size=2``: each step's fixed costs (the loader's
fetch and collate, a dozen op dispatches forward and backward, Adam over four tensors) dwarf the
arithmetic of two samples.

``--fixed``: a batch of 64 (``--fixed-batch-size``), the same model and optimizer: a batch large
enough that the fixed costs stop dominating, and the largest step one SMALL_BATCH finding asks for
(32x, the range over which linear learning-rate scaling was validated). The doctor names the batch
at which its model predicts that a further doubling gains under 5 %, within that 32x, and prices
exactly that batch; here its fixed costs are nearly the whole step, so it names the same 64.
"""

from __future__ import annotations

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=200, batch_size=2, fixed_batch_size=64, hidden=64)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(65536, 32, generator=gen), torch.randint(0, 2, (65536,), generator=gen))
    loader = DataLoader(data, batch_size=args.fixed_batch_size if args.fixed else args.batch_size, shuffle=True)
    model = nn.Sequential(nn.Linear(32, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 2))
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
