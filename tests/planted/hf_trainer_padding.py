"""Planted bottleneck: HF ``Trainer`` on a dataset pre-padded to ``max_length`` (expect PADDING_WASTE; needs ``transformers``, ``accelerate``).

The usual recipe: ``dataset.map(lambda b: tokenizer(b["text"], padding="max_length", max_length=256))``
then ``Trainer(...)`` with the default collator. The token ids are synthetic (no tokenizer
download), the model a small ``BertForSequenceClassification`` from its config. Most of each batch
is padding.

``--fixed``: no padding in the dataset, a collator that pads each batch to its longest (as
``DataCollatorWithPadding``), and length grouping switched on in ``TrainingArguments`` (the field
the installed transformers has: ``train_sampling_strategy="group_by_length"`` in 5.x,
``group_by_length=True`` in 4.x).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile

import numpy as np
import torch
from _timing import StepTimer, native_bf16, planted_args
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments


class Encoded(Dataset):
    def __init__(self, count: int, mean_len: int, max_len: int, pad_to_max: bool) -> None:
        rng = np.random.default_rng(0)
        lengths = np.clip(rng.lognormal(np.log(mean_len), 0.7, count).astype(int), 8, max_len)
        self.rows = []
        for n in lengths:
            ids = rng.integers(5, 8000, n).tolist()
            mask = [1] * n
            if pad_to_max:
                ids, mask = ids + [0] * (max_len - n), mask + [0] * (max_len - n)
            self.rows.append({"input_ids": ids, "attention_mask": mask, "labels": int(rng.integers(0, 2))})

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int):
        return self.rows[i]


def pad_to_longest(features):
    longest = max(len(f["input_ids"]) for f in features)
    ids = torch.zeros(len(features), longest, dtype=torch.long)
    mask = torch.zeros(len(features), longest, dtype=torch.long)
    for r, f in enumerate(features):
        ids[r, : len(f["input_ids"])] = torch.tensor(f["input_ids"])
        mask[r, : len(f["input_ids"])] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([f["labels"] for f in features])}


class Timing(TrainerCallback):
    def __init__(self, timer: StepTimer, batch_size: int) -> None:
        self.timer, self.batch_size = timer, batch_size

    def on_step_end(self, args, state, control, **kwargs):
        self.timer.step(self.batch_size)


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=30, batch_size=16, max_len=256, mean_len=48, hidden=256)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=8000, hidden_size=args.hidden, num_hidden_layers=4, num_attention_heads=4,
                        intermediate_size=4 * args.hidden, max_position_embeddings=max(512, args.max_len))
    model = BertForSequenceClassification(config)
    train = Encoded(2048, args.mean_len, args.max_len, pad_to_max=not args.fixed)
    extra = {}
    if args.fixed:
        fields = TrainingArguments.__dataclass_fields__
        extra = ({"train_sampling_strategy": "group_by_length"} if "train_sampling_strategy" in fields
                 else {"group_by_length": True})
    out_dir = tempfile.mkdtemp(prefix="stave-planted-hf-")
    atexit.register(shutil.rmtree, out_dir, True)
    training_args = TrainingArguments(
        output_dir=out_dir, per_device_train_batch_size=args.batch_size, max_steps=args.steps, learning_rate=5e-5,
        report_to="none", save_strategy="no", logging_strategy="no", use_cpu=True, bf16=native_bf16(),
        disable_tqdm=True, seed=0, **extra,
    )
    timer = StepTimer(args.steps, args.warmup)
    trainer = Trainer(model=model, args=training_args, train_dataset=train,
                      data_collator=pad_to_longest if args.fixed else None, callbacks=[Timing(timer, args.batch_size)])
    trainer.train()
    timer.report()


if __name__ == "__main__":
    main()
