"""Planted bottleneck on a GPU: a wide MLP trained in fp32 with TF32 off (expect NO_MIXED_PRECISION).

PyTorch's default for fp32 matrix products on CUDA is full fp32 (``float32_matmul_precision`` is
"highest"): they run on the GPU's plain fp32 units, not its tensor cores, at a small fraction of
the bf16 rate. The step is almost all matrix products (batch 8192 through 4096-wide layers).

``--fixed``: bf16 autocast around forward and loss (the weights and the optimizer stay fp32).
"""

from __future__ import annotations

import contextlib

import torch
from _timing import StepTimer, device_autocast, device_sync, planted_args, planted_device
from torch import nn


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=25, batch_size=8192, width=4096)
    device = planted_device()
    torch.manual_seed(0)
    data = torch.randn(2 * args.batch_size, args.width, device=device)
    labels = torch.randint(0, 1000, (2 * args.batch_size,), device=device)
    model = nn.Sequential(
        nn.Linear(args.width, args.width), nn.GELU(), nn.Linear(args.width, args.width), nn.GELU(),
        nn.Linear(args.width, args.width), nn.GELU(), nn.Linear(args.width, 1000),
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    criterion = nn.CrossEntropyLoss()
    timer = StepTimer(args.steps, args.warmup, sync=device_sync(device))
    step = 0
    while not timer.done:
        i = (step % 2) * args.batch_size
        x, y = data[i:i + args.batch_size], labels[i:i + args.batch_size]
        with device_autocast(device) if args.fixed else contextlib.nullcontext():
            loss = criterion(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        timer.step(x.shape[0])
        step += 1
    timer.report()


if __name__ == "__main__":
    main()
