"""Planted bottleneck: a token-budget sampler's varying batch sizes under ``torch.compile(dynamic=False)`` (expect RECOMPILES).

Batches are built to a token budget (as fairseq-style samplers do), so the batch size changes
from step to step while the sequence length is fixed. The model was compiled with
``dynamic=False``: each new batch size is a new graph, compiled again until dynamo's recompile
limit, after which the model runs uncompiled.

``--fixed``: ``torch.compile(model)`` with the batch dimension marked dynamic
(``torch._dynamo.mark_dynamic(x, 0)``): one graph for every batch size.
"""

from __future__ import annotations

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=40, token_budget=4096, seq_len=64, dim=128)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    net = nn.Sequential(nn.Linear(args.dim, 2 * args.dim), nn.GELU(), nn.LayerNorm(2 * args.dim),
                        nn.Linear(2 * args.dim, args.dim), nn.GELU(), nn.Linear(args.dim, 10))
    model = torch.compile(net) if args.fixed else torch.compile(net, dynamic=False)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        # The sampler packs as many sequences as the budget allows; real lengths vary, so does the count.
        batch = int(args.token_budget // int(torch.randint(args.seq_len // 2, args.seq_len + 1, (), generator=gen)))
        x = torch.randn(batch, args.seq_len, args.dim, generator=gen)
        y = torch.randint(0, 10, (batch, args.seq_len), generator=gen)
        if args.fixed:
            torch._dynamo.mark_dynamic(x, 0)
        with cpu_autocast():
            loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        timer.step(batch)
    timer.report()


if __name__ == "__main__":
    main()
