"""A small character-level GPT (nanoGPT / llm.c style, seed 003), as a plain PyTorch script.

The corpus is the text of Python's own help topics (``pydoc_data.topics``, shipped with every
CPython), about 0.8 million characters of English prose and code: nothing to download. Each
sample is a random window of ``block_size + 1`` characters: the first ``block_size`` are the input,
the last ``block_size`` the targets (next-character prediction).

    python examples/gpt_char.py [--steps 200] [--batch-size 16]

``stave bench ladder --workload gpt-char`` climbs the optimization ladder from these definitions.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset


def load_corpus() -> str:
    """Python's help topics as one text (sorted by topic, so the corpus is the same everywhere)."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key] for key in sorted(topics))


class CharDataset(Dataset):
    """Windows of ``block_size + 1`` characters as (input ids, target ids), int64."""

    def __init__(self, text: str, block_size: int, num_samples: int | None = None, seed: int = 0) -> None:
        chars = sorted(set(text))
        self.vocab = chars
        self.stoi = {c: i for i, c in enumerate(chars)}
        self.data = np.array([self.stoi[c] for c in text], dtype=np.uint8 if len(chars) < 256 else np.int32)
        self.block_size = block_size
        windows = len(self.data) - block_size - 1
        count = num_samples or windows
        # Window starts drawn once from a private generator: the dataset is fixed across runs.
        self.starts = np.random.default_rng(seed).integers(0, windows, size=count)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = int(self.starts[index])
        chunk = torch.from_numpy(self.data[start : start + self.block_size + 1].astype(np.int64))
        return chunk[:-1], chunk[1:]


@dataclass(frozen=True)
class GPTConfig:
    """Model size. The default is a few million parameters: seconds per step on two CPU cores."""

    vocab_size: int = 128
    block_size: int = 128
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 256
    dropout: float = 0.0


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention with a causal mask (flash/memory-efficient kernels via SDPA)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.dropout = config.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    """Pre-norm transformer block: attention then a 4x MLP, each with a residual."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, 4 * config.n_embd), nn.GELU(), nn.Linear(4 * config.n_embd, config.n_embd)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token + position embeddings, blocks, final norm, and a head tied to the token embedding."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.tok = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.head.weight = self.tok.weight
        self.apply(self._init)
        for name, param in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                # GPT-2's scaled init of the residual projections.
                nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of next-character prediction over every position."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def build_optimizer(model: nn.Module, lr: float = 1e-3) -> torch.optim.Optimizer:
    """AdamW as nanoGPT sets it up: weight decay on matrices only, betas (0.9, 0.95)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-every", type=int, default=20)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dataset = CharDataset(load_corpus(), args.block_size, num_samples=args.steps * args.batch_size, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)
    model = GPT(GPTConfig(vocab_size=dataset.vocab_size, block_size=args.block_size)).to(device)
    optimizer = build_optimizer(model)
    start = time.perf_counter()
    tokens = 0
    for step, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        loss = lm_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        tokens += x.numel()
        if step % args.log_every == 0:
            rate = tokens / (time.perf_counter() - start)
            print(f"step {step} loss {loss.item():.4f} {rate:.0f} tokens/s")


if __name__ == "__main__":
    main()
