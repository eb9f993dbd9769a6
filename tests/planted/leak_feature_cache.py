"""Planted bottleneck: a feature cache that keeps autograd graphs (expect MEMORY_GROWTH).

A "speed-up" caches the encoder's features per batch index in a dict, to reuse them for a
contrastive term against the previous batch. The cached tensors are not detached, so each holds
its step's graph and activations, and the dict is never pruned: memory grows every step.

``--fixed``: the cache stores ``feats.detach()`` and keeps only the last entry.
"""

from __future__ import annotations

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=100, batch_size=256, dim=1024)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    encoder = nn.Sequential(nn.Linear(256, args.dim), nn.GELU(), nn.Linear(args.dim, args.dim))
    head = nn.Linear(args.dim, 10)
    opt = torch.optim.AdamW(list(encoder.parameters()) + list(head.parameters()), lr=1e-3)
    cache: dict[int, torch.Tensor] = {}
    timer = StepTimer(args.steps, args.warmup)
    step = 0
    while not timer.done:
        x = torch.randn(args.batch_size, 256, generator=gen)
        y = torch.randint(0, 10, (args.batch_size,), generator=gen)
        with cpu_autocast():
            feats = encoder(x)
            loss = nn.functional.cross_entropy(head(feats), y)
            if step - 1 in cache:
                loss = loss + 0.01 * (feats.mean(0) - cache[step - 1].detach().mean(0)).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.fixed:
            cache = {step: feats.detach()}
        else:
            cache[step] = feats  # the leak: graph and activations kept for every step
        step += 1
        timer.step(args.batch_size)
    timer.report()


if __name__ == "__main__":
    main()
