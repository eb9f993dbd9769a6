"""Planted control: a healthy, compute-bound script (expect no warning, and no input-pipeline finding).

Data in memory, fetched a whole batch per index (no per-sample ``__getitem__`` and collate, whose
cost shows once the compute is fast), a batch large enough that fixed per-step costs are a small
share, bf16 autocast on a CPU that has it, one torch thread per core, nothing kept across steps.
Its time goes into the model's matmuls, as it should. ``--fixed`` changes nothing.
"""

from __future__ import annotations

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset


def main() -> None:
    args = planted_args(__doc__.splitlines()[0])
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    dataset = TensorDataset(torch.randn(4096, 1024, generator=gen), torch.randint(0, 10, (4096,), generator=gen))
    # TensorDataset indexes with a list of indices: one fetch per batch, no per-sample collate.
    loader = DataLoader(dataset, batch_size=None, sampler=BatchSampler(RandomSampler(dataset), 256, drop_last=False))
    model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    timer = StepTimer(args.steps, args.warmup)
    running = 0.0
    while not timer.done:
        for x, y in loader:
            with cpu_autocast():
                loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running += loss.item()
            timer.step(x.shape[0])
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
