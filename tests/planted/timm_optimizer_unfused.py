"""Planted bottleneck: timm's optimizer factory with ``foreach=False`` on a ViT (expect OPTIMIZER_UNFUSED; needs ``timm``).

A small ViT from ``timm.create_model(..., pretrained=False)`` and
``timm.optim.create_optimizer_v2(model, "adamw", foreach=False)``, as a timm ``train.py`` run with
``--opt adamw`` and a foreach override does: ~150 parameter tensors updated one by one.

``--fixed``: ``foreach=True`` (multi-tensor AdamW).
"""

from __future__ import annotations

import timm
import torch
from _timing import StepTimer, cpu_autocast, planted_args
from timm.optim import create_optimizer_v2
from torch import nn


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=40, batch_size=16, depth=12, embed_dim=96)
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, num_classes=10,
                              depth=args.depth, embed_dim=args.embed_dim, num_heads=3)
    optimizer = create_optimizer_v2(model, "adamw", lr=1e-3, weight_decay=0.05, foreach=bool(args.fixed))
    gen = torch.Generator().manual_seed(0)
    loss_fn = nn.CrossEntropyLoss()
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        x = torch.randn(args.batch_size, 3, 32, 32, generator=gen)
        y = torch.randint(0, 10, (args.batch_size,), generator=gen)
        with cpu_autocast():
            loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        timer.step(args.batch_size)
    timer.report()


if __name__ == "__main__":
    main()
