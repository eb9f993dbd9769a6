"""Planted bottleneck on a GPU: an MLP trained at batch 16 (expect SMALL_BATCH).

At 16 samples a step the GPU's work is a few microseconds a kernel; the step's time is the host
launching some hundred kernels (forward, backward, Adam's per-parameter update) one after another.
Those launches cost the same at batch 1024, so a larger batch buys nearly its whole factor in
samples per second.

``--fixed``: batch 1024 (``--fixed-batch-size N``: N).
"""

from __future__ import annotations

import torch
from _timing import StepTimer, device_autocast, device_sync, planted_args, planted_device
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=150, batch_size=16, fixed_batch_size=1024, width=512)
    device = planted_device()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    dataset = TensorDataset(torch.randn(65536, args.width, generator=gen), torch.randint(0, 10, (65536,), generator=gen))
    batch = args.fixed_batch_size if args.fixed else args.batch_size
    # One fetch per batch (TensorDataset takes a list of indices): the loader's cost stays per batch.
    loader = DataLoader(dataset, batch_size=None, pin_memory=device.type == "cuda",
                        sampler=BatchSampler(RandomSampler(dataset, generator=gen), batch, drop_last=True))
    layers: list[nn.Module] = []
    for _ in range(6):
        layers += [nn.Linear(args.width, args.width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(args.width, 10)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()
    timer = StepTimer(args.steps, args.warmup, sync=device_sync(device))
    while not timer.done:
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
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
