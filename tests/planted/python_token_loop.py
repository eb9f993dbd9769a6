"""Planted bottleneck: language-model labels masked token by token in Python (expect PYTHON_OVERHEAD).

Before each step the script builds the labels of a masked-LM batch with a double Python loop over
samples and positions (``labels[b, t] = -100`` where the token is not masked), as code ported
from a per-example preprocessing function does. The model is a small embedding + MLP.

``--fixed``: ``torch.where(mask, ids, -100)`` on the whole batch.
"""

from __future__ import annotations

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=40, batch_size=16, seq_len=64, dim=128)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    vocab = 2000
    model = nn.Sequential(nn.Embedding(vocab, args.dim), nn.Linear(args.dim, 2 * args.dim), nn.GELU(),
                          nn.Linear(2 * args.dim, vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        ids = torch.randint(1, vocab, (args.batch_size, args.seq_len), generator=gen)
        mask = torch.rand(args.batch_size, args.seq_len, generator=gen) < 0.15
        if args.fixed:
            labels = torch.where(mask, ids, torch.full_like(ids, -100))
        else:
            labels = ids.clone()
            for b in range(args.batch_size):
                for t in range(args.seq_len):
                    if not mask[b, t]:
                        labels[b, t] = -100
        inputs = ids.masked_fill(mask, 0)
        with cpu_autocast():
            logits = model(inputs)
            loss = nn.functional.cross_entropy(logits.view(-1, vocab), labels.view(-1), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
        timer.step(args.batch_size)
    timer.report()


if __name__ == "__main__":
    main()
