"""Planted bottleneck: AdamW with ``foreach=False`` over hundreds of small tensors (expect OPTIMIZER_UNFUSED).

A deep, narrow residual MLP (48 blocks, each with two Linear layers and a LayerNorm: ~300 parameter
tensors, most of them small) trained with ``AdamW(foreach=False)`` (set once to work around an old
bug, never removed): the optimizer walks every tensor in Python, a dozen small ops each, and
becomes a large share of the step.

The batch (256) keeps forward and backward mostly arithmetic: with a batch of 32 the step is all
fixed cost (the optimizer and the per-op dispatch of forward and backward alike), which plants
SMALL_BATCH as much as this mechanism, and a 4x batch amortizes the optimizer as well as fusing it.

``--fixed``: ``AdamW(fused=True)`` (one kernel over all tensors per op on CPU as well).
"""

from __future__ import annotations

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, dim)
        self.fc2 = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.relu(self.fc1(self.norm(x))))


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=40, blocks=48, dim=64, batch_size=256)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = nn.Sequential(*[Block(args.dim) for _ in range(args.blocks)], nn.Linear(args.dim, 10))
    opt = (torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True) if args.fixed
           else torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False))
    x_all = torch.randn(4096, args.dim, generator=gen)
    y_all = torch.randint(0, 10, (4096,), generator=gen)
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        idx = torch.randint(0, 4096, (args.batch_size,), generator=gen)
        with cpu_autocast():
            loss = nn.functional.cross_entropy(model(x_all[idx]), y_all[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        timer.step(args.batch_size)
    timer.report()


if __name__ == "__main__":
    main()
