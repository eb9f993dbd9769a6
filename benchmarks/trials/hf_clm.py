# run_clm-style: tiny GPT-2 from a config, group_texts into fixed blocks (no padding), HF Trainer, healthy
import numpy as np, torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments, default_data_collator
from torch.utils.data import Dataset
block_size = 128
rng = np.random.default_rng(0)
tokens = rng.integers(0, 5000, size=block_size * 640)
class Blocks(Dataset):
    def __len__(self): return len(tokens) // block_size
    def __getitem__(self, i):
        ids = tokens[i * block_size:(i + 1) * block_size].tolist()
        return {"input_ids": ids, "attention_mask": [1] * block_size, "labels": ids}
config = GPT2Config(vocab_size=5000, n_positions=block_size, n_embd=128, n_layer=3, n_head=4)
model = GPT2LMHeadModel(config)
args = TrainingArguments(output_dir="/tmp/hf_clm_out", per_device_train_batch_size=8, max_steps=60, logging_steps=20,
                         save_strategy="no", report_to=[], learning_rate=5e-4, use_cpu=True, dataloader_num_workers=0)
trainer = Trainer(model=model, args=args, train_dataset=Blocks(), data_collator=default_data_collator)
trainer.train()
