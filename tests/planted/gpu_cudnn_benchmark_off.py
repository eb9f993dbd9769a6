"""Planted setting on a GPU: a conv net with cuDNN autotuning off (expect CUDNN_BENCHMARK_OFF).

With ``torch.backends.cudnn.benchmark`` False (PyTorch's default) cuDNN picks each convolution's
algorithm by heuristics; on, it times the candidates for each input shape once and keeps the
fastest. The input shape is fixed, so autotuning costs only the first step. The rest of the loop
is healthy: bf16 autocast, channels_last, data resident on the device, no reads back.

``--fixed``: ``torch.backends.cudnn.benchmark = True`` before the first forward.
"""

from __future__ import annotations

import torch
import torchvision
from _timing import StepTimer, device_autocast, device_sync, planted_args, planted_device
from torch import nn


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=30, batch_size=256, size=96)
    device = planted_device()
    torch.backends.cudnn.benchmark = args.fixed
    torch.manual_seed(0)
    data = torch.randn(2 * args.batch_size, 3, args.size, args.size, device=device).contiguous(
        memory_format=torch.channels_last)
    labels = torch.randint(0, 100, (2 * args.batch_size,), device=device)
    model = torchvision.models.resnet50(num_classes=100).to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
    criterion = nn.CrossEntropyLoss()
    timer = StepTimer(args.steps, args.warmup, sync=device_sync(device))
    step = 0
    while not timer.done:
        i = (step % 2) * args.batch_size
        x, y = data[i:i + args.batch_size], labels[i:i + args.batch_size]
        with device_autocast(device):
            loss = criterion(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        timer.step(x.shape[0])
        step += 1
    timer.report()


if __name__ == "__main__":
    main()
