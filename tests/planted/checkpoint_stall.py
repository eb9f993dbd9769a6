"""Planted bottleneck: a checkpoint written in the training loop every 4 steps (expect STEP_OUTLIERS).

Every ``CHECKPOINT_EVERY`` steps the loop calls ``torch.save`` on the model and optimizer state
(about 130 MB) before training on: that step stalls while the state is serialized and written.
The rest of the step is an otherwise healthy one: a batch of 256 through a few wide layers in
bf16 autocast where the CPU has native bf16 (fp32 elsewhere). (At a batch of 32 the 2048-wide
layers are bound by reading their weights, a per-call cost: a 16x batch measured 2.5-3x samples/s
there, a real SMALL_BATCH larger than the stall.)

``--fixed``: a checkpoint every ``FIXED_EVERY`` steps instead, what the doctor suggests on a
CPU-only run: there the save needs the same cores as the training, so a background thread would
not take it off the critical path (on a GPU, where the host is free while the GPU computes, it
would: that is the doctor's advice there).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

CHECKPOINT_EVERY = 4
FIXED_EVERY = 60


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], batch_size=256)
    torch.manual_seed(0)
    out_dir = tempfile.mkdtemp(prefix="stave-planted-ckpt-")
    atexit.register(shutil.rmtree, out_dir, True)
    gen = torch.Generator().manual_seed(0)
    dataset = TensorDataset(torch.randn(1024, 2048, generator=gen), torch.randint(0, 10, (1024,), generator=gen))
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)
    model = nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                          nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    timer = StepTimer(args.steps, args.warmup)
    every = FIXED_EVERY if args.fixed else CHECKPOINT_EVERY
    path = os.path.join(out_dir, "checkpoint.pt")
    while not timer.done:
        for x, y in loader:
            with cpu_autocast():
                loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if timer.taken % every == every - 1:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
            timer.step(x.shape[0])
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
