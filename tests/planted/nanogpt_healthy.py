"""Planted control: a nanoGPT-style character model (expect no finding about the job).

Written like nanoGPT's ``train.py``: ``get_batch`` slices random windows out of one token array (no
DataLoader), a 4-layer GPT (n_embd 384, 6 heads, block 128, so matmuls about 4096x128x384) with
``F.scaled_dot_product_attention``, AdamW, ``clip_grad_norm_`` every step, the forward under bf16
autocast where the CPU has native bf16 (nanoGPT's ``ctx``). The Python in the loop is library
calls, and nothing is wasted: the doctor should name nothing, and PYTHON_OVERHEAD must not fire on
the ``clip_grad_norm_`` line.
Tokens per step: batch x block. ``--fixed`` changes nothing.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(n_embd)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, block_size: int, n_layer: int, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.wte.weight = self.lm_head.weight
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * n_layer))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=30, batch_size=32, block_size=128, n_layer=4, n_embd=384)
    torch.manual_seed(1337)
    data = torch.randint(0, 65, (200_000,), generator=torch.Generator().manual_seed(0))

    def get_batch():
        ix = torch.randint(len(data) - args.block_size, (args.batch_size,))
        x = torch.stack([data[i : i + args.block_size] for i in ix])
        y = torch.stack([data[i + 1 : i + 1 + args.block_size] for i in ix])
        return x, y

    model = GPT(65, args.block_size, args.n_layer, args.n_embd, 6)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    timer = StepTimer(args.steps, args.warmup)
    X, Y = get_batch()
    while not timer.done:
        with cpu_autocast():
            loss = model(X, Y)
        X, Y = get_batch()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        timer.step(args.batch_size)
    timer.report()


if __name__ == "__main__":
    main()
