"""Planted bottleneck: each DDP rank lists and reads every file (expect NO_DISTRIBUTED_SAMPLER; torchrun).

The dataset is a directory of small files; each rank builds its file list with ``sorted(os.listdir())``
and reads all of them, shuffled with a per-rank seed (so the indices differ between ranks, but the
files, and so the samples, are the same). The timing counts distinct samples per second.

``--fixed``: each rank takes its own slice of the file list (``files[rank::world]``).
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
from torch.utils.data import DataLoader, Dataset

FEATURES = 256


class FileSamples(Dataset):
    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        x = np.fromfile(self.paths[i], dtype=np.float32)
        return torch.from_numpy(x), int(os.path.basename(self.paths[i]).split("_")[1].split(".")[0])


def shared_dir(rank: int, count: int) -> str:
    # Rank 0 writes the files; the others wait for them (one directory per launch, named by the rendezvous).
    root = os.path.join(tempfile.gettempdir(), f"stave-planted-ddpfiles-{os.environ.get('TORCHELASTIC_RUN_ID', 'x')}")
    if rank == 0:
        os.makedirs(root, exist_ok=True)
        atexit.register(shutil.rmtree, root, True)
        rng = np.random.default_rng(0)
        for i in range(count):
            rng.standard_normal(FEATURES).astype(np.float32).tofile(os.path.join(root, f"{i:05d}_{i % 10}.bin"))
    dist.barrier()
    return root


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], batch_size=32, hidden=512)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    files = sorted(os.path.join(root, n) for root in [shared_dir(rank, 2048)] for n in os.listdir(root))
    if args.fixed:
        files = files[rank::world]
    gen = torch.Generator().manual_seed(rank)
    loader = DataLoader(FileSamples(files), batch_size=args.batch_size, shuffle=True, generator=gen, num_workers=1,
                        persistent_workers=True)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(FEATURES, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        for x, y in loader:
            with cpu_autocast():
                loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            timer.step(x.shape[0] * (world if args.fixed else 1))
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
