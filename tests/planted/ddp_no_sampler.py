"""Planted bottleneck: DDP without a DistributedSampler (expect NO_DISTRIBUTED_SAMPLER; run with torchrun).

Two ranks (gloo, CPU) wrap the model in DistributedDataParallel but build their DataLoader with
``shuffle=True`` and the same seed, as a single-process script does: every rank trains on the
same samples in the same order, so the job learns from one rank's worth of data at two ranks'
cost. The timing counts *distinct* samples per second (what an epoch's wall time follows).

``--fixed``: ``DistributedSampler`` (each rank its own half), ``set_epoch`` every epoch.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], batch_size=64, hidden=512)
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(8192, 256, generator=gen), torch.randint(0, 10, (8192,), generator=gen))
    sampler = DistributedSampler(data, shuffle=True, seed=0) if args.fixed else None
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=sampler is None, sampler=sampler)
    model = DDP(nn.Sequential(nn.Linear(256, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    timer = StepTimer(args.steps, args.warmup)
    epoch = 0
    while not timer.done:
        if sampler is not None:
            sampler.set_epoch(epoch)
        for x, y in loader:
            with cpu_autocast():
                loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            # Distinct samples the job trained on this step: with a sampler the ranks' batches differ.
            timer.step(x.shape[0] * (world if args.fixed else 1))
            if timer.done:
                break
        epoch += 1
    if int(os.environ.get("RANK", "0")) == 0:
        timer.report()
    dist.destroy_process_group()
    # torch 2.14's gloo sometimes aborts a rank at interpreter exit, after the group is destroyed
    # ('terminate called without an active exception': 5 of 8 runs on a 2-core Zen 4, this script's
    # code before and after autocast alike). The work and its timing are done: leave without that teardown.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
