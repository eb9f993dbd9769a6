"""Planted bottleneck: ``torch.set_num_threads(16)`` on a machine with fewer cores (expect THREAD_OVERSUBSCRIPTION).

A conv net for 64x64 images, trained with 16 intra-op threads because the script was tuned on a
16-core workstation (``torch.set_num_threads(args.threads)``). Each conv is split into 16 chunks
whose threads queue for the few cores; every op ends at a barrier that waits for the last chunk.

``--fixed``: ``--threads`` left at torch's default (one per usable core).
"""

from __future__ import annotations

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], threads=16, batch_size=32, width=32)
    if not args.fixed:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(1024, 3, 64, 64, generator=gen), torch.randint(0, 10, (1024,), generator=gen))
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True)
    w = args.width
    model = nn.Sequential(
        nn.Conv2d(3, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU(),
        nn.Conv2d(w, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(w, 2 * w, 3, padding=1), nn.BatchNorm2d(2 * w), nn.ReLU(), nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * w, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
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
