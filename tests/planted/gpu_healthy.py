"""Planted control on a GPU: a compute-bound bf16 MLP fed from device memory (expect no finding).

The batch is already on the device (sliced from a resident tensor, as nanoGPT-style loops do), the
matrix products run in bf16 under autocast on tensor cores, AdamW is fused, the loss is read back
once every 100 steps, and each step is large enough (8192 x 4096 through four 4096-wide layers,
about 1.6 TFLOP with backward) that the host's launches hide behind the GPU's work. ``--fixed``
changes nothing.
"""

from __future__ import annotations

import torch
from _timing import StepTimer, device_autocast, device_sync, planted_args, planted_device
from torch import nn


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=40, batch_size=8192, width=4096)
    device = planted_device()
    torch.manual_seed(0)
    data = torch.randn(4 * args.batch_size, args.width, device=device)
    labels = torch.randint(0, 1000, (4 * args.batch_size,), device=device)
    model = nn.Sequential(
        nn.Linear(args.width, args.width), nn.GELU(), nn.Linear(args.width, args.width), nn.GELU(),
        nn.Linear(args.width, args.width), nn.GELU(), nn.Linear(args.width, 1000),
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    criterion = nn.CrossEntropyLoss()
    timer = StepTimer(args.steps, args.warmup, sync=device_sync(device))
    step = 0
    while not timer.done:
        i = (step % 4) * args.batch_size
        x, y = data[i:i + args.batch_size], labels[i:i + args.batch_size]
        with device_autocast(device):
            loss = criterion(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        timer.step(x.shape[0])
        step += 1
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    timer.report()


if __name__ == "__main__":
    main()
