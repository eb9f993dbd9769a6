"""Planted bottleneck: a plain-PyTorch transformer on batches padded to a fixed length (expect PADDING_WASTE).

Sequences of varying length (mostly short, a few long) are padded to ``--max-len`` by the
dataset itself, with a key padding mask for ``nn.TransformerEncoder``: the encoder's matmuls and
attention run over every pad position.

``--fixed``: what the doctor names for this length distribution (a long tail: padding to each
batch's longest alone would leave most of the padding): samples grouped by length (the control's
sampler, ``padded_longest_healthy.py``), each batch padded to its own longest. Step times then vary
with each batch's length: compare mean step times. ``--accum N``: N micro-batches per optimizer step.
"""

from __future__ import annotations

import numpy as np
import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from padded_longest_healthy import LengthGroupedBatches
from torch.utils.data import DataLoader, Dataset

PAD = 0


class Sequences(Dataset):
    def __init__(self, count: int, mean_len: int, max_len: int, pad_to_max: bool) -> None:
        rng = np.random.default_rng(0)
        lengths = np.clip(rng.exponential(mean_len, count).astype(int), 4, max_len)
        self.lengths = lengths
        self.seqs = [torch.from_numpy(rng.integers(1, 4000, n)) for n in lengths]
        self.labels = torch.from_numpy(rng.integers(0, 4, count))
        self.max_len = max_len
        self.pad_to_max = pad_to_max

    def __len__(self) -> int:
        return len(self.seqs)

    def __getitem__(self, i: int):
        s = self.seqs[i]
        if self.pad_to_max:
            s = nn.functional.pad(s, (0, self.max_len - len(s)), value=PAD)
        return s, self.labels[i]


def collate(batch):
    seqs = nn.utils.rnn.pad_sequence([s for s, _ in batch], batch_first=True, padding_value=PAD)
    return seqs, torch.stack([y for _, y in batch])


class Encoder(nn.Module):
    def __init__(self, dim: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(4000, dim, padding_idx=PAD)
        layer = nn.TransformerEncoderLayer(dim, 4, 4 * dim, batch_first=True, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pad = ids == PAD
        h = self.encoder(self.embed(ids), src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).float()
        return self.head((h * keep).sum(1) / keep.sum(1).clamp(min=1.0))


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=30, batch_size=32, max_len=256, mean_len=40, dim=128, layers=2,
                        accum=1)
    torch.manual_seed(0)
    data = Sequences(2048, args.mean_len, args.max_len, pad_to_max=not args.fixed)
    if args.fixed:
        loader = DataLoader(data, batch_sampler=LengthGroupedBatches(data.lengths, args.batch_size), collate_fn=collate)
    else:
        loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, collate_fn=collate)
    model = Encoder(args.dim, args.layers)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    timer = StepTimer(args.steps, args.warmup)
    micro = 0
    while not timer.done:
        for ids, y in loader:
            with cpu_autocast():
                loss = nn.functional.cross_entropy(model(ids), y) / args.accum
            loss.backward()
            micro += 1
            if micro % args.accum:
                continue
            opt.step()
            opt.zero_grad()
            timer.step(ids.shape[0] * args.accum)
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
