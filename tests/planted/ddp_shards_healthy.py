"""Planted control: DDP ranks each reading their own shard files (expect no finding about the job; torchrun).

The dataset is pre-sharded: rank r opens ``shard-r.npy`` only, shuffles it with the same seed as
every other rank (so the local indices overlap completely) and trains, fetching whole batches. The samples differ, since
the files differ: this is correct use, and NO_DISTRIBUTED_SAMPLER must not be said.
``--fixed`` changes nothing.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset


def rank_shard(rank: int, rows: int) -> str:
    root = os.path.join(tempfile.gettempdir(), f"stave-planted-shards-{os.environ.get('TORCHELASTIC_RUN_ID', 'x')}")
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, f"shard-{rank}.npy")
    rng = np.random.default_rng(100 + rank)
    np.save(path, rng.standard_normal((rows, 257)).astype(np.float32))
    if rank == 0:
        atexit.register(shutil.rmtree, root, True)
    return path


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], batch_size=256, hidden=512)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    table = torch.from_numpy(np.load(rank_shard(rank, 4096)))
    data = TensorDataset(table[:, :256], (table[:, 256].abs() * 10).long().clamp(max=9))
    # Whole batches per index (TensorDataset takes a list): the step is healthy apart from the
    # sampling question this control is about.
    sampler = BatchSampler(RandomSampler(data, generator=torch.Generator().manual_seed(0)), args.batch_size,
                           drop_last=False)
    loader = DataLoader(data, batch_size=None, sampler=sampler)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(256, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        for x, y in loader:
            with cpu_autocast():
                loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            timer.step(x.shape[0] * dist.get_world_size())
            if timer.done:
                break
    dist.barrier()
    if rank == 0:
        timer.report()
    dist.destroy_process_group()
    # torch 2.14's gloo sometimes aborts a rank at interpreter exit, after the group is destroyed
    # ('terminate called without an active exception': 5 of 8 runs on a 2-core Zen 4, this script's
    # code before and after autocast alike). The work and its timing are done: leave without that teardown.
    sys.stdout.flush()
    atexit._run_exitfuncs()  # the shard files' clean-up, which os._exit would skip
    os._exit(0)


if __name__ == "__main__":
    main()
