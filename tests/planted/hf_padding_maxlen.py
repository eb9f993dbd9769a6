"""Planted bottleneck: a BERT classifier fed batches padded to ``max_length`` (expect PADDING_WASTE; needs ``transformers``).

As ``tokenizer(texts, padding="max_length", max_length=256, truncation=True)`` produces them: every
sequence padded to 256 tokens, while the real lengths (synthetic token ids, a long-tailed length
distribution around ``--mean-len``) are mostly far shorter. The model (built from a ``BertConfig``,
no download) computes on the pad tokens too, attention's quadratic part included.

``--fixed``: what the doctor names for these lengths (padding to each batch's longest alone
would leave most of the padding): samples grouped by length (the sampler of
``padded_longest_healthy.py``, as ``train_sampling_strategy="group_by_length"`` does in the
Trainer), each batch padded to its own longest (what ``DataCollatorWithPadding`` does). Step
times then vary with each batch's length: compare mean step times.
"""

from __future__ import annotations

import numpy as np
import torch
from _timing import StepTimer, cpu_autocast, planted_args
from padded_longest_healthy import LengthGroupedBatches
from torch.utils.data import DataLoader, Dataset
from transformers import BertConfig, BertForSequenceClassification


class Texts(Dataset):
    def __init__(self, count: int, mean_len: int, max_len: int) -> None:
        rng = np.random.default_rng(0)
        lengths = np.clip(rng.lognormal(np.log(mean_len), 0.6, count).astype(int), 8, max_len)
        self.ids = [rng.integers(5, 8000, n).tolist() for n in lengths]
        self.labels = rng.integers(0, 2, count).tolist()

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int):
        return {"input_ids": self.ids[i], "label": self.labels[i]}


def pad_collate(max_length: int | None):
    def collate(features):
        longest = max(len(f["input_ids"]) for f in features)
        width = max_length or longest
        ids = torch.zeros(len(features), width, dtype=torch.long)
        mask = torch.zeros(len(features), width, dtype=torch.long)
        for row, f in enumerate(features):
            ids[row, : len(f["input_ids"])] = torch.tensor(f["input_ids"])
            mask[row, : len(f["input_ids"])] = 1
        return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([f["label"] for f in features])}
    return collate


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=30, batch_size=16, max_len=256, mean_len=48, hidden=256, layers=4)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=8000, hidden_size=args.hidden, num_hidden_layers=args.layers, num_attention_heads=4,
                        intermediate_size=4 * args.hidden, max_position_embeddings=max(512, args.max_len))
    model = BertForSequenceClassification(config)
    texts = Texts(2048, args.mean_len, args.max_len)
    if args.fixed:
        lengths = np.array([len(ids) for ids in texts.ids])
        loader = DataLoader(texts, batch_sampler=LengthGroupedBatches(lengths, args.batch_size),
                            collate_fn=pad_collate(None))
    else:
        loader = DataLoader(texts, batch_size=args.batch_size, shuffle=True, collate_fn=pad_collate(args.max_len))
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
    model.train()
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        for batch in loader:
            with cpu_autocast():
                outputs = model(**batch)
            outputs.loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            timer.step(batch["input_ids"].shape[0])
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
