"""Planted bottleneck: one worker reading records from high-latency storage (expect DATA_IO_BOUND).

Samples are 16 KiB records in a few shard files; each ``__getitem__`` opens its shard and reads one
record from storage that answers after ``READ_LATENCY_S`` (emulated with a sleep, off-CPU like an
object-store GET). One loader worker issues one read at a time and cannot keep up.

``--fixed``: four workers per usable core, more reads in flight (``--fixed-workers N``: N instead).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time

import numpy as np
import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import DataLoader, Dataset

READ_LATENCY_S = 0.004
RECORD_FLOATS = 4096
PER_SHARD = 256


class ShardRecords(Dataset):
    def __init__(self, root: str, shards: int) -> None:
        self.root = root
        self.count = shards * PER_SHARD

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int):
        shard, row = divmod(i, PER_SHARD)
        with open(os.path.join(self.root, f"shard-{shard:03d}.bin"), "rb") as f:
            time.sleep(READ_LATENCY_S)  # emulated storage latency
            f.seek(row * RECORD_FLOATS * 4)
            x = np.frombuffer(f.read(RECORD_FLOATS * 4), dtype=np.float32).copy()
        return torch.from_numpy(x), i % 10


def make_shards(shards: int) -> str:
    root = tempfile.mkdtemp(prefix="stave-planted-shards-")
    atexit.register(shutil.rmtree, root, True)
    rng = np.random.default_rng(0)
    for s in range(shards):
        rng.standard_normal((PER_SHARD, RECORD_FLOATS)).astype(np.float32).tofile(
            os.path.join(root, f"shard-{s:03d}.bin"))
    return root


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=30, batch_size=32, hidden=512, fixed_workers=0)
    torch.manual_seed(0)
    workers = (args.fixed_workers or 4 * len(os.sched_getaffinity(0))) if args.fixed else 1
    loader = DataLoader(ShardRecords(make_shards(4), 4), batch_size=args.batch_size, shuffle=True,
                        num_workers=workers, persistent_workers=True)
    model = nn.Sequential(nn.Linear(RECORD_FLOATS, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        for x, y in loader:
            with cpu_autocast():
                loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            timer.step(x.shape[0])
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
