"""Planted bottleneck: tabular features kept as float64 from pandas-style numpy (expect BATCH_DTYPE).

A tabular regression: features come out of ``np.loadtxt``-like code as float64, the dataset
returns rows as they are, and the training loop casts each batch (``x.float()``) because the model
is float32. Every batch is built, collated and copied at twice the bytes, and cast once more.

``--fixed``: the feature table converted to float32 once, when the dataset is built.
"""

from __future__ import annotations

import numpy as np
import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Table(Dataset):
    def __init__(self, rows: int, cols: int, float32: bool) -> None:
        rng = np.random.default_rng(0)
        self.features = rng.standard_normal((rows, cols))  # float64, like np.loadtxt / DataFrame.values
        if float32:
            self.features = self.features.astype(np.float32)
        self.target = self.features[:, :8].sum(axis=1, keepdims=True)

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, i: int):
        return self.features[i], self.target[i]


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], cols=2048, batch_size=256, hidden=256, workers=2)
    torch.manual_seed(0)
    loader = DataLoader(Table(4096, args.cols, float32=args.fixed), batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers, persistent_workers=True)
    model = nn.Sequential(nn.Linear(args.cols, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        for x, y in loader:
            with cpu_autocast():
                pred = model(x.float())
                loss = nn.functional.mse_loss(pred, y.float())
            opt.zero_grad()
            loss.backward()
            opt.step()
            timer.step(x.shape[0])
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
