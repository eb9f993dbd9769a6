"""Planted bottleneck: per-sample metrics in a Python loop with ``.item()`` (expect PYTHON_OVERHEAD).

After each step the script updates accuracy and a confusion matrix sample by sample: for every one
of the batch's 256 predictions it calls ``.argmax().item()`` and ``.item()`` on the label and
increments Python counters. Hundreds of tiny tensor ops and conversions per step, in the loop.

``--fixed``: the same counts from one ``argmax`` and a ``bincount`` over the batch.
"""

from __future__ import annotations

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

CLASSES = 10


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=60, batch_size=256, hidden=256)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(8192, 128, generator=gen), torch.randint(0, CLASSES, (8192,), generator=gen))
    # Whole batches by one index (no per-sample fetch): the data path is not what this script plants.
    loader = DataLoader(data, batch_size=None, sampler=BatchSampler(RandomSampler(data), args.batch_size, drop_last=True))
    model = nn.Sequential(nn.Linear(128, args.hidden), nn.ReLU(), nn.Linear(args.hidden, CLASSES))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    confusion = [[0] * CLASSES for _ in range(CLASSES)]
    counts = torch.zeros(CLASSES * CLASSES, dtype=torch.long)
    correct = total = 0
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        for x, y in loader:
            with cpu_autocast():
                out = model(x)
                loss = nn.functional.cross_entropy(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if args.fixed:
                pred = out.detach().argmax(1)
                counts += torch.bincount(y * CLASSES + pred, minlength=CLASSES * CLASSES)
                correct += int((pred == y).sum())
                total += len(y)
            else:
                for i in range(len(y)):
                    p, t = out[i].argmax().item(), y[i].item()
                    confusion[t][p] += 1
                    correct += int(p == t)
                    total += 1
            timer.step(x.shape[0])
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
