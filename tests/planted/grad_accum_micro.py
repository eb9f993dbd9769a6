"""Planted bottleneck: gradient accumulation over micro-batches of 2 (expect SMALL_BATCH).

To reach an effective batch of 64 the script accumulates 32 micro-batches of 2 samples before each
optimizer step (a recipe for a GPU with little memory, run where memory is not the limit). Each
micro-batch pays the per-batch costs (loader fetch, dispatch of every op forward and backward) for
two samples: the micro-batch, not the effective batch, is what is small.

``--fixed``: one micro-batch of 64 per optimizer step (the same effective batch): the change the
doctor names too where memory does not limit it (all micro-batches merged; the learning rate stays).
"""

from __future__ import annotations

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=30, effective_batch=64, micro_batch=2, hidden=256)
    micro = args.effective_batch if args.fixed else args.micro_batch
    accum = args.effective_batch // micro
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(16384, 128, generator=gen), torch.randint(0, 10, (16384,), generator=gen))
    loader = DataLoader(data, batch_size=micro, shuffle=True, drop_last=True)
    model = nn.Sequential(nn.Linear(128, args.hidden), nn.GELU(), nn.Linear(args.hidden, args.hidden), nn.GELU(),
                          nn.Linear(args.hidden, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    timer = StepTimer(args.steps, args.warmup)
    seen = 0
    while not timer.done:
        for i, (x, y) in enumerate(loader):
            with cpu_autocast():
                loss = nn.functional.cross_entropy(model(x), y) / accum
            loss.backward()
            seen += x.shape[0]
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
                timer.step(seen)
                seen = 0
                if timer.done:
                    break
    timer.report()


if __name__ == "__main__":
    main()
