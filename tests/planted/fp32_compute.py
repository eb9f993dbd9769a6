"""Planted bottleneck: fp32 matmuls on a CPU with native bf16 (expect NO_MIXED_PRECISION).

A wide MLP at batch 256 spends its step in matrix multiplies, in fp32. On CPUs with AMX-BF16 or
AVX512-BF16 (this repository's test machine has AMX) bf16 matmuls run several times faster, and
``torch.autocast`` uses them while keeping the weights and the optimizer in fp32. (On a CPU without
native bf16 the doctor does not suggest this, and this script is simply compute-bound.)

``--fixed``: forward and loss under ``torch.autocast("cpu", dtype=torch.bfloat16)``.
"""

from __future__ import annotations

import contextlib

import torch
from _timing import StepTimer, planted_args
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    args = planted_args(__doc__.splitlines()[0])
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    dataset = TensorDataset(torch.randn(4096, 1024, generator=gen), torch.randint(0, 10, (4096,), generator=gen))
    loader = DataLoader(dataset, batch_size=256, shuffle=True)
    model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        for x, y in loader:
            precision = torch.autocast("cpu", dtype=torch.bfloat16) if args.fixed else contextlib.nullcontext()
            with precision:
                loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            timer.step(x.shape[0])
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
