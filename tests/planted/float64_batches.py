"""Planted bottleneck: float64 batches and a model made float64 to match (expect BATCH_DTYPE).

The dataset hands out numpy arrays, whose default float type is float64; ``torch.from_numpy``
keeps it, the first forward fails with a dtype mismatch, and the usual quick fix is
``model.double()``. Everything then computes in float64, at half the fp32 rate or worse.

``--fixed``: the dataset converts to float32 and the model stays float32.
"""

from __future__ import annotations

import numpy as np
import torch
from _timing import StepTimer, planted_args
from torch import nn
from torch.utils.data import DataLoader, Dataset


class ArrayDataset(Dataset):
    """Features as a numpy float64 array, as numpy creates them by default."""

    def __init__(self, count: int, as_float32: bool) -> None:
        rng = np.random.default_rng(0)
        self.features = rng.standard_normal((count, 512))  # float64
        self.labels = rng.integers(0, 10, size=count)
        self.as_float32 = as_float32

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        x = self.features[index]
        if self.as_float32:
            x = x.astype(np.float32)
        return torch.from_numpy(x), int(self.labels[index])


def main() -> None:
    args = planted_args(__doc__.splitlines()[0])
    torch.manual_seed(0)
    loader = DataLoader(ArrayDataset(4096, as_float32=args.fixed), batch_size=128, shuffle=True)
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    if not args.fixed:
        model = model.double()  # "expected Double but found Float": the quick fix
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        for x, y in loader:
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
