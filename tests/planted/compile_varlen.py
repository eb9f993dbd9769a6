"""Planted bottleneck: ``torch.compile(dynamic=False)`` fed batches of varying length (expect RECOMPILES).

A token classifier (embedding, two MLP blocks, mean pooling) is compiled with ``dynamic=False``
("static shapes are faster"), and each batch is padded to its own longest sequence, so almost
every batch brings a new sequence length: dynamo recompiles the model for each new shape until
its recompile limit, then runs it uncompiled.

``--fixed``: pad every batch up to a multiple of ``--bucket`` tokens (a handful of shapes, each
compiled once); the same samples and the same model.
"""

from __future__ import annotations

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn


class TokenClassifier(nn.Module):
    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.GELU())
        self.head = nn.Linear(dim, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = (ids != 0).unsqueeze(-1).float()
        h = self.mlp(self.embed(ids)) * mask
        return self.head(h.sum(1) / mask.sum(1).clamp(min=1.0))


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=40, batch_size=16, dim=128, max_len=256, bucket=128)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = torch.compile(TokenClassifier(5000, args.dim), dynamic=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        lengths = torch.randint(8, args.max_len + 1, (args.batch_size,), generator=gen)
        longest = int(lengths.max())
        if args.fixed:
            longest = -(-longest // args.bucket) * args.bucket
        ids = torch.randint(1, 5000, (args.batch_size, longest), generator=gen)
        ids[torch.arange(longest)[None, :] >= lengths[:, None]] = 0
        labels = (lengths > args.max_len // 2).long()
        with cpu_autocast():
            loss = nn.functional.cross_entropy(model(ids), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        timer.step(args.batch_size)
    timer.report()


if __name__ == "__main__":
    main()
