"""Planted bottleneck: per-sample reads with storage latency in the main process (expect DATA_IO_BOUND).

Each sample is a small file opened in ``__getitem__`` on storage that answers after a delay
(emulated: ``READ_LATENCY_S`` of sleep before the read, off-CPU like a blocked NFS read), with
``num_workers=0``: the training loop waits out every read, one after another.

``--fixed``: eight workers per usable core (``--fixed-workers N``: N instead) keep reads in flight (blocked workers use no CPU): enough
to hide the ~70 ms of reads per batch behind the compute. The doctor names ``ceil(L / C) + 1``
workers from its measurements, bounded by memory rather than cores (see io_latency.py): where both
hide the latency, they are the same change for the step.
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

READ_LATENCY_S = 0.002


class Files(Dataset):
    def __init__(self, root: str) -> None:
        self.paths = sorted(os.path.join(root, n) for n in os.listdir(root))

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        with open(self.paths[i], "rb") as f:
            time.sleep(READ_LATENCY_S)  # emulated storage latency
            x = np.frombuffer(f.read(), dtype=np.float32).copy()
        return torch.from_numpy(x), i % 10


def make_files(count: int, features: int) -> str:
    root = tempfile.mkdtemp(prefix="stave-planted-iomain-")
    atexit.register(shutil.rmtree, root, True)
    rng = np.random.default_rng(0)
    for i in range(count):
        rng.standard_normal(features).astype(np.float32).tofile(os.path.join(root, f"{i:05d}.bin"))
    return root


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=30, batch_size=32, features=512, fixed_workers=0)
    torch.manual_seed(0)
    dataset = Files(make_files(1024, args.features))
    extra = {"num_workers": args.fixed_workers or 8 * len(os.sched_getaffinity(0)), "persistent_workers": True} if args.fixed else {}
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, **extra)
    model = nn.Sequential(nn.Linear(args.features, 512), nn.ReLU(), nn.Linear(512, 10))
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
