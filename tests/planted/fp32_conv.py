"""Planted bottleneck: a conv net trained in fp32 on a CPU with native bf16 (expect NO_MIXED_PRECISION there).

A VGG-style conv net at 96x96, batch 32: the step is convolutions, which oneDNN runs several times
faster in bf16 on CPUs with AMX or AVX512-BF16. On a CPU without native bf16 (AVX2 only) bf16 is
emulated and slower, and the doctor should say nothing: the registry expects no finding there.

``--fixed``: forward and loss under ``torch.autocast("cpu", dtype=torch.bfloat16)``.
"""

from __future__ import annotations

import contextlib

import torch
from _timing import StepTimer, planted_args
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU(),
                         nn.MaxPool2d(2))


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=30, batch_size=32, width=64, size=96)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(512, 3, args.size, args.size, generator=gen),
                         torch.randint(0, 10, (512,), generator=gen))
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True)
    w = args.width
    model = nn.Sequential(block(3, w), block(w, 2 * w), block(2 * w, 4 * w), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(4 * w, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        for x, y in loader:
            ctx = torch.autocast("cpu", dtype=torch.bfloat16) if args.fixed else contextlib.nullcontext()
            with ctx:
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
