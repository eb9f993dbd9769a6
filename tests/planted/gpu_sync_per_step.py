"""Planted bottleneck on a GPU: the loss and the accuracy read back every step (expect SYNC_IN_LOOP).

``loss.item()`` and ``(pred == y).sum().item()`` each make the host wait until the GPU has run
everything queued so far; the GPU then idles while the host launches the next step's kernels. When
the host's launch time and the GPU's work are of the same order (a 12-layer MLP at batch 4096 on a
fast GPU), the two no longer overlap and the step takes their sum instead of the larger.

``--fixed``: the running loss and the correct count are kept on the GPU and read once every 50
steps (and at the end).
"""

from __future__ import annotations

import torch
from _timing import StepTimer, device_autocast, device_sync, planted_args, planted_device
from torch import nn


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=40, batch_size=4096, width=2048, layers=12)
    device = planted_device()
    torch.manual_seed(0)
    data = torch.randn(4 * args.batch_size, args.width, device=device)
    labels = torch.randint(0, 100, (4 * args.batch_size,), device=device)
    blocks: list[nn.Module] = []
    for _ in range(args.layers):
        blocks += [nn.Linear(args.width, args.width), nn.LayerNorm(args.width), nn.GELU()]
    model = nn.Sequential(*blocks, nn.Linear(args.width, 100)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    criterion = nn.CrossEntropyLoss()
    timer = StepTimer(args.steps, args.warmup, sync=device_sync(device))
    total_loss = torch.zeros((), device=device)
    correct = torch.zeros((), dtype=torch.long, device=device)
    seen = 0
    step = 0
    while not timer.done:
        i = (step % 4) * args.batch_size
        x, y = data[i:i + args.batch_size], labels[i:i + args.batch_size]
        with device_autocast(device):
            out = model(x)
            loss = criterion(out, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        seen += y.shape[0]
        if args.fixed:
            total_loss += loss.detach()
            correct += (out.argmax(1) == y).sum()
            if (step + 1) % 50 == 0:
                print(f"step {step + 1} loss {total_loss.item() / 50:.3f} acc {correct.item() / seen:.3f}")
                total_loss.zero_(), correct.zero_()
                seen = 0
        else:
            running = loss.item()
            hits = (out.argmax(1) == y).sum().item()
            if (step + 1) % 50 == 0:
                print(f"step {step + 1} loss {running:.3f} acc {hits / y.shape[0]:.3f}")
        timer.step(x.shape[0])
        step += 1
    timer.report()


if __name__ == "__main__":
    main()
