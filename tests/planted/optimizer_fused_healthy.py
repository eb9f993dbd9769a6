"""Planted control: many small parameter tensors with a fused AdamW (expect no finding about the job).

The residual MLP of ``optimizer_many_params.py`` at a batch large enough for the step to be
compute, trained with ``AdamW(fused=True)``: the optimizer is a small share of the step.
``--fixed`` changes nothing.
"""

from __future__ import annotations

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=40, blocks=24, dim=256, batch_size=512)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(args.blocks):
        layers += [nn.LayerNorm(args.dim), nn.Linear(args.dim, args.dim), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(args.dim, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    x_all = torch.randn(8192, args.dim, generator=gen)
    y_all = torch.randint(0, 10, (8192,), generator=gen)
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        idx = torch.randint(0, 8192, (args.batch_size,), generator=gen)
        with cpu_autocast():
            loss = nn.functional.cross_entropy(model(x_all[idx]), y_all[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        timer.step(args.batch_size)
    timer.report()


if __name__ == "__main__":
    main()
