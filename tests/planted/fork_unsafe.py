"""Planted bottleneck: a file handle opened in the dataset's ``__init__`` (expect FORK_UNSAFE_HANDLE).

The dataset opens its data file once, in ``__init__``, and reads records with ``seek`` + ``read``.
The two forked loader workers inherit that one open file description, with one shared offset:
a seek in one worker moves the other's read, and samples come back wrong without any error. The
run is otherwise healthy (bf16 autocast where the CPU has it, reads that hide behind the compute), so the finding is
about correctness.

``--fixed``: the file is opened lazily, once per worker, on first use.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import numpy as np
import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import DataLoader, Dataset

FEATURES = 512
RECORD_BYTES = FEATURES * 4


class RecordFile(Dataset):
    """Fixed-size float32 records in one file."""

    def __init__(self, path: str, count: int, lazy: bool) -> None:
        self.path = path
        self.count = count
        self.labels = np.arange(count) % 10
        self.handle = None if lazy else open(path, "rb")  # the planted problem: shared after fork

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int):
        if self.handle is None:
            self.handle = open(self.path, "rb")
        self.handle.seek(index * RECORD_BYTES)
        data = self.handle.read(RECORD_BYTES)
        return torch.frombuffer(bytearray(data), dtype=torch.float32), int(self.labels[index])


def write_records(count: int) -> str:
    root = tempfile.mkdtemp(prefix="stave-planted-fork-")
    atexit.register(shutil.rmtree, root, True)
    path = os.path.join(root, "records.bin")
    np.random.default_rng(0).standard_normal((count, FEATURES)).astype(np.float32).tofile(path)
    return path


def main() -> None:
    args = planted_args(__doc__.splitlines()[0])
    torch.manual_seed(0)
    count = 4096
    dataset = RecordFile(write_records(count), count, lazy=args.fixed)
    loader = DataLoader(dataset, batch_size=128, shuffle=True, num_workers=2, persistent_workers=True)
    model = nn.Sequential(nn.Linear(FEATURES, 2048), nn.GELU(), nn.Linear(2048, 2048), nn.GELU(), nn.Linear(2048, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        for x, y in loader:
            with cpu_autocast():
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
