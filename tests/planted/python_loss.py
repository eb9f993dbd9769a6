"""Planted bottleneck: a loss computed sample by sample in a Python loop (expect PYTHON_OVERHEAD).

The loss adds up one ``cross_entropy`` per sample of a batch of 128, each on a one-row slice: 128
tiny ops (and 128 autograd nodes for backward to replay) where one batched op would do. The loop
runs outside any ``nn.Module``, in the training script itself.

``--fixed``: ``F.cross_entropy(out, y, reduction="sum")``, the same value in one op.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset


def per_sample_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    loss = out.new_zeros(())
    for i in range(len(y)):
        loss = loss + F.cross_entropy(out[i : i + 1], y[i : i + 1])
    return loss


def main() -> None:
    args = planted_args(__doc__.splitlines()[0])
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    dataset = TensorDataset(torch.randn(4096, 256, generator=gen), torch.randint(0, 10, (4096,), generator=gen))
    # Whole batches by one index (no per-sample fetch): the data path is not what this script plants.
    loader = DataLoader(dataset, batch_size=None, sampler=BatchSampler(RandomSampler(dataset), 128, drop_last=False))
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        for x, y in loader:
            with cpu_autocast():
                out = model(x)
                loss = F.cross_entropy(out, y, reduction="sum") if args.fixed else per_sample_loss(out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            timer.step(x.shape[0])
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
