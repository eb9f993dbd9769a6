"""Planted control: token batches padded to each batch's longest, lengths grouped (expect no finding about the job).

The encoder of ``plain_padding_maxlen.py``, fed the right way: samples sorted into buckets of
similar length (a length-grouped sampler), each batch padded to its own longest sequence, so pad
tokens are a few percent of the batch. Its AdamW is the fused one: the CPU default (a loop over the
tensors) took 11 % of the step on a 2-core Cascade Lake, where ``fused=True`` measured 1.12-1.25x on
the median step (three interleaved pairs) and the doctor rightly named OPTIMIZER_UNFUSED 1.09x: a
control plants nothing. ``--fixed`` changes nothing.
"""

from __future__ import annotations

import numpy as np
import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import DataLoader, Sampler

PAD = 0


class LengthGroupedBatches(Sampler):
    """Batches of indices with similar lengths, shuffled batch by batch."""

    def __init__(self, lengths: np.ndarray, batch_size: int, seed: int = 0) -> None:
        order = np.argsort(lengths, kind="stable")
        self.batches = [order[i : i + batch_size].tolist() for i in range(0, len(order), batch_size)]
        self.rng = np.random.default_rng(seed)

    def __iter__(self):
        for i in self.rng.permutation(len(self.batches)):
            yield self.batches[i]

    def __len__(self) -> int:
        return len(self.batches)


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=30, batch_size=32, max_len=256, mean_len=40, dim=128)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.exponential(args.mean_len, 2048).astype(int), 4, args.max_len)
    seqs = [torch.from_numpy(rng.integers(1, 4000, n)) for n in lengths]
    labels = torch.from_numpy(rng.integers(0, 4, len(seqs)))

    def collate(idx):
        return (nn.utils.rnn.pad_sequence([seqs[i] for i in idx], batch_first=True, padding_value=PAD),
                labels[idx])

    loader = DataLoader(list(range(len(seqs))), batch_sampler=LengthGroupedBatches(lengths, args.batch_size),
                        collate_fn=collate)
    embed = nn.Embedding(4000, args.dim, padding_idx=PAD)
    layer = nn.TransformerEncoderLayer(args.dim, 4, 4 * args.dim, batch_first=True, dropout=0.0)
    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    head = nn.Linear(args.dim, 4)
    params = [*embed.parameters(), *encoder.parameters(), *head.parameters()]
    opt = torch.optim.AdamW(params, lr=3e-4, fused=True)
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        for ids, y in loader:
            pad = ids == PAD
            with cpu_autocast():
                h = encoder(embed(ids), src_key_padding_mask=pad)
                keep = (~pad).unsqueeze(-1).float()
                loss = nn.functional.cross_entropy(head((h * keep).sum(1) / keep.sum(1).clamp(min=1.0)), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            timer.step(ids.shape[0])
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
