"""Planted bottleneck: many small files on storage with per-read latency (expect DATA_IO_BOUND).

Each sample is its own 1 KiB file, opened and read in ``__getitem__``, as an image folder on a
network file system is. The latency of such storage is emulated: every read first sleeps
``READ_LATENCY_S`` (network file systems and object stores answer a small read in 1-10 ms). A
sleeping worker is off-CPU and not waiting for a core, exactly like one blocked in a read on NFS,
so the doctor sees what it would see there; local disk I/O counters (iowait) stay quiet, as they
do for network storage. Two loader workers cannot keep up with the small model.

``--fixed``: eight workers per usable core (``--fixed-workers N``: N instead, to time the count the doctor named) keep that many reads in flight (blocked workers use no
CPU): enough to hide the ~100 ms of reads per batch behind a few ms of compute, which is what the
author means by the fix. The doctor names its own count from the measurements (the workers whose
reads keep up with the compute, plus a spare, ``ceil(L / C) + 1``; bounded by memory, not cores):
where both hide the latency, the step is the compute either way, so the estimate and the
measurement price the same change.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import DataLoader, Dataset

READ_LATENCY_S = 0.003
FEATURES = 256


class FileDataset(Dataset):
    """One file per sample: FEATURES float32 values; the label is in the file name."""

    def __init__(self, root: str) -> None:
        self.paths = sorted(os.path.join(root, name) for name in os.listdir(root))

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        path = self.paths[index]
        with open(path, "rb") as handle:
            time.sleep(READ_LATENCY_S)  # emulated storage latency (see the module docstring)
            data = handle.read()
        x = torch.frombuffer(bytearray(data), dtype=torch.float32)
        label = int(os.path.basename(path).split("_")[1].split(".")[0])
        return x, label


def write_files(count: int) -> str:
    root = tempfile.mkdtemp(prefix="stave-planted-io-")
    atexit.register(shutil.rmtree, root, True)
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(count, FEATURES, generator=gen)
    for i in range(count):
        with open(os.path.join(root, f"{i:05d}_{i % 10}.bin"), "wb") as handle:
            handle.write(values[i].numpy().tobytes())
    return root


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], fixed_workers=0)
    torch.manual_seed(0)
    dataset = FileDataset(write_files(1024))
    cores = len(os.sched_getaffinity(0))
    workers = (args.fixed_workers or 8 * cores) if args.fixed else 2
    loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=workers, persistent_workers=True)
    model = nn.Sequential(nn.Linear(FEATURES, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
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
