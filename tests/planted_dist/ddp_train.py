"""A tiny DDP training script (gloo, CPU) with plantable distributed problems.

Run it under a launcher: ``stave doctor --nproc-per-node 2 tests/planted_dist/ddp_train.py [OPTIONS]``.

--straggler-rank R --delay-ms D   rank R's dataset sleeps D ms per batch (it waits for data)
--sampler distributed|none|custom  DistributedSampler, a plain shuffled loader seeded alike on
                                   every rank, or a hand-written shard-aware sampler
--kill-rank R --kill-step S        rank R kills itself with SIGKILL at step S (no clean exit)
--accum K [--no-sync]              K micro-batches per optimizer step, with or without model.no_sync()
--find-unused                      DDP(find_unused_parameters=True) with a branch never used
--user-hook                        register the user's own comm hook (counts its calls)
"""

import argparse
import contextlib
import os
import signal
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, Sampler
from torch.utils.data.distributed import DistributedSampler


class Numbers(Dataset):
    """Deterministic random features; rank ``slow_rank`` sleeps ``delay_s`` per batch of ``batch``."""

    def __init__(self, n, slow, delay_s, batch):
        g = torch.Generator().manual_seed(1234)
        self.x = torch.randn(n, 64, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.delay_s = delay_s if slow else 0.0
        self.batch = batch

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if self.delay_s:
            time.sleep(self.delay_s / self.batch)
        return self.x[i], self.y[i]


class StridedShards(Sampler):
    """A shard-aware sampler that is not a DistributedSampler: rank r takes r, r+W, r+2W, ..."""

    def __init__(self, n, rank, world):
        self.idx = list(range(rank, n, world))

    def __iter__(self):
        return iter(self.idx)

    def __len__(self):
        return len(self.idx)


class Net(torch.nn.Module):
    def __init__(self, unused_branch):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
        self.unused = torch.nn.Linear(64, 10) if unused_branch else None

    def forward(self, x):
        return self.body(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--straggler-rank", type=int, default=-1)
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--sampler", choices=("distributed", "none", "custom"), default="distributed")
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--kill-step", type=int, default=3)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--no-sync", action="store_true")
    p.add_argument("--find-unused", action="store_true")
    p.add_argument("--user-hook", action="store_true")
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same seed on every rank, as most scripts do
    data = Numbers(args.samples, rank == args.straggler_rank, args.delay_ms / 1e3, args.batch)
    if args.sampler == "distributed":
        sampler = DistributedSampler(data, shuffle=True, seed=0)
        loader = DataLoader(data, batch_size=args.batch, sampler=sampler)
    elif args.sampler == "custom":
        sampler = StridedShards(len(data), rank, world)
        loader = DataLoader(data, batch_size=args.batch, sampler=sampler)
    else:
        sampler = None
        loader = DataLoader(data, batch_size=args.batch, shuffle=True)

    model = torch.nn.parallel.DistributedDataParallel(Net(args.find_unused), find_unused_parameters=args.find_unused)
    hook_calls = [0]
    if args.user_hook:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        def counting_hook(state, bucket):
            hook_calls[0] += 1
            if hook_calls[0] == 1:
                print(f"rank {rank}: user comm hook called", flush=True)
            return default_hooks.allreduce_hook(state, bucket)

        model.register_comm_hook(None, counting_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    crit = torch.nn.CrossEntropyLoss()
    step = 0
    for epoch in range(args.epochs):
        if isinstance(sampler, DistributedSampler):
            sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            last = (i + 1) % args.accum == 0
            ctx = model.no_sync() if (args.no_sync and not last) else contextlib.nullcontext()
            with ctx:
                loss = crit(model(x), y) / args.accum
                loss.backward()
            if not last:
                continue
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            if rank == args.kill_rank and step == args.kill_step:
                os.kill(os.getpid(), signal.SIGKILL)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
