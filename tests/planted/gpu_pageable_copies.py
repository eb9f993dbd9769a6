"""Planted bottleneck on a GPU: large float batches copied from pageable memory (expect H2D_PAGEABLE).

The dataset is a float32 image tensor in host memory, served a whole batch per index by a
DataLoader without ``pin_memory``. Each step copies 256 x 3 x 160 x 160 floats (about 79 MB) to the
GPU; from pageable memory the driver stages it through its own bounce buffer, synchronously,
so the copy runs at a fraction of the link's speed and the GPU (a small bf16 conv net) waits for it.

``--fixed``: ``pin_memory=True`` on the DataLoader and ``non_blocking=True`` on the copies.
"""

from __future__ import annotations

import torch
from _timing import StepTimer, device_autocast, device_sync, planted_args, planted_device
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=30, batch_size=256, size=160, batches=8)
    device = planted_device()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    n = args.batches * args.batch_size
    dataset = TensorDataset(torch.randn(n, 3, args.size, args.size, generator=gen),
                            torch.randint(0, 10, (n,), generator=gen))
    # TensorDataset indexes with a list of indices: one fetch per batch, no per-sample collate.
    loader = DataLoader(dataset, batch_size=None, pin_memory=args.fixed and device.type == "cuda",
                        sampler=BatchSampler(RandomSampler(dataset, generator=gen), args.batch_size, drop_last=True))
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    ).to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    timer = StepTimer(args.steps, args.warmup, sync=device_sync(device))
    while not timer.done:
        for x, y in loader:
            x = x.to(device, non_blocking=args.fixed).contiguous(memory_format=torch.channels_last)
            y = y.to(device, non_blocking=args.fixed)
            with device_autocast(device):
                loss = criterion(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            timer.step(x.shape[0])
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
