"""Planted control: a compiled model fed one shape (expect no finding about the job).

The token classifier of ``compile_varlen.py`` compiled once: every batch is padded to the same
length, so dynamo compiles once, at the first step, and never again. Its steps are short and
compute-bound. Its AdamW is the fused one: unfused, its update of 1.8 M values took 12 % of the
step, and ``fused=True`` measured 1.09-1.14x (the doctor's OPTIMIZER_UNFUSED said 1.09-1.10x), so
the plain optimizer made this a planted optimizer row, not a control. ``--fixed`` changes nothing.
"""

from __future__ import annotations

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=40, batch_size=32, dim=256, seq_len=128)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    net = nn.Sequential(nn.Embedding(5000, args.dim), nn.Linear(args.dim, 4 * args.dim), nn.GELU(),
                        nn.Linear(4 * args.dim, args.dim))
    head = nn.Linear(args.dim, 2)
    model = torch.compile(net)
    opt = torch.optim.AdamW(list(net.parameters()) + list(head.parameters()), lr=1e-3, fused=True)
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        ids = torch.randint(0, 5000, (args.batch_size, args.seq_len), generator=gen)
        labels = torch.randint(0, 2, (args.batch_size,), generator=gen)
        with cpu_autocast():
            loss = nn.functional.cross_entropy(head(model(ids).mean(1)), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        timer.step(args.batch_size)
    timer.report()


if __name__ == "__main__":
    main()
