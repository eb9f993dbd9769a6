"""Planted bottleneck: a full validation pass every 5 training steps (expect EVAL_OVERHEAD).

The loop evaluates on the whole validation set (``model.eval()``, ``torch.no_grad()``) every
``--eval-every`` steps, as a script written for long epochs does when its epoch is short. The
validation set is larger than five training batches, so most wall time goes to evaluation.

``--batched-fetch 1``, with a larger ``--batch-size`` and ``--hidden``, makes the rest of the loop
healthy (whole batches per index, fixed per-step costs a small share): the family's control, where
only the evaluation interval is in question.

``--fixed``: evaluation every ``--fixed-eval-every`` steps (beyond the run here): the author's "rarely
enough not to matter". The doctor names the interval at which evaluation is under 4.8 % of the wall
time, where removing it altogether would gain under 1.05x: the two agree to within that.
"""

from __future__ import annotations

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader) -> float:
    model.eval()
    correct = total = 0
    for x, y in loader:
        with cpu_autocast():
            correct += int((model(x).argmax(1) == y).sum())
        total += len(y)
    model.train()
    return correct / total


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=40, batch_size=64, eval_every=5, fixed_eval_every=1000,
                        val_size=2048, hidden=512, batched_fetch=0)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    train = TensorDataset(torch.randn(8192, 256, generator=gen), torch.randint(0, 10, (8192,), generator=gen))
    val = TensorDataset(torch.randn(args.val_size, 256, generator=gen), torch.randint(0, 10, (args.val_size,), generator=gen))
    if args.batched_fetch:
        # One index per batch (TensorDataset takes a list): no per-sample __getitem__ and collate.
        sampler = BatchSampler(RandomSampler(train), args.batch_size, drop_last=False)
        train_loader = DataLoader(train, batch_size=None, sampler=sampler)
    else:
        train_loader = DataLoader(train, batch_size=args.batch_size, shuffle=True)
    val_loader = DataLoader(val, batch_size=256)
    model = nn.Sequential(nn.Linear(256, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    every = args.fixed_eval_every if args.fixed else args.eval_every
    timer = StepTimer(args.steps, args.warmup)
    step = 0
    while not timer.done:
        for x, y in train_loader:
            with cpu_autocast():
                loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step % every == 0:
                evaluate(model, val_loader)
            timer.step(x.shape[0])
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
