"""Planted bottleneck: an accelerate loop with an unfused AdamW (expect OPTIMIZER_UNFUSED; needs ``accelerate``).

Written like accelerate's examples: ``Accelerator()``, ``accelerator.prepare(model, optimizer,
loader)``, ``accelerator.backward(loss)``. The optimizer is ``AdamW(foreach=False)`` over a
transformer-ish stack with many small tensors (biases, LayerNorms), so the per-tensor optimizer
loop is a large share of each step.

``--fixed``: ``AdamW(fused=True)``.
"""

from __future__ import annotations

import torch
from _timing import StepTimer, native_bf16, planted_args
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=40, layers=6, dim=128, batch_size=16, seq_len=32)
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True, mixed_precision="bf16" if native_bf16() else "no")
    gen = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(2048, args.seq_len, args.dim, generator=gen),
                         torch.randint(0, 10, (2048,), generator=gen))
    layer = nn.TransformerEncoderLayer(args.dim, 4, 2 * args.dim, batch_first=True, dropout=0.0)
    model = nn.Sequential(nn.TransformerEncoder(layer, args.layers, enable_nested_tensor=False), nn.Flatten(),
                          nn.Linear(args.seq_len * args.dim, 10))
    optimizer = (torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True) if args.fixed
                 else torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False))
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    timer = StepTimer(args.steps, args.warmup)
    model.train()
    while not timer.done:
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            timer.step(x.shape[0])
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
