"""Planted bottleneck: multi-scale training of a compiled conv net (expect RECOMPILES).

Detection-style multi-scale training picks a random input resolution every step (here one of
many sizes between 64 and 160 pixels in steps of 8) and the conv net is compiled with
``dynamic=False``: each resolution is a new graph, compiled again until the recompile limit.

``--fixed``: each image zero-padded up to the next multiple of 32 (the usual "size divisible by 32" of
detection models): four shapes, each compiled once; the same resolutions are drawn. Marking the
height and width dynamic is no fix here: on a CPU the compiled convolutions specialize on the
input size, and ``torch.compile(dynamic=True)`` compiled the same seven graphs in a 12-step run.
"""

from __future__ import annotations

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=40, batch_size=8, width=16)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    w = args.width
    net = nn.Sequential(nn.Conv2d(3, w, 3, padding=1), nn.ReLU(), nn.Conv2d(w, 2 * w, 3, stride=2, padding=1), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * w, 10))
    model = torch.compile(net, dynamic=False)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    sizes = list(range(64, 161, 8))
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        size = sizes[int(torch.randint(0, len(sizes), (), generator=gen))]
        x = torch.randn(args.batch_size, 3, size, size, generator=gen)
        y = torch.randint(0, 10, (args.batch_size,), generator=gen)
        if args.fixed:
            # Pad each image up to the next multiple of 32: four shapes, each compiled once.
            pad = -size % 32
            x = nn.functional.pad(x, (0, pad, 0, pad))
        with cpu_autocast():
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        timer.step(args.batch_size)
    timer.report()


if __name__ == "__main__":
    main()
