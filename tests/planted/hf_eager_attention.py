"""Planted bottleneck: a causal LM loaded with ``attn_implementation="eager"`` (expect ATTENTION_EAGER; needs ``transformers``).

A small Llama-style model built from a ``LlamaConfig`` (no download), trained on synthetic token
sequences of ``--seq`` tokens, with the eager attention an old notebook pinned (it needed attention
weights once): every layer materializes the ``[batch, heads, seq, seq]`` score matrix, its softmax
and their gradients, where PyTorch's fused ``scaled_dot_product_attention`` would not.

``--fixed``: ``attn_implementation="sdpa"``. ``--attn sdpa`` runs the healthy control (SDPA from
the start; ``--fixed`` changes nothing then).
"""

from __future__ import annotations

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from transformers import LlamaConfig, LlamaForCausalLM

# A small vocabulary keeps the LM head from dwarfing the layers (attention is what is planted).
VOCAB = 1000


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=30, batch_size=2, seq=512, hidden=128, layers=4, heads=4,
                        attn="eager")
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    attn = "sdpa" if args.fixed else args.attn
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=args.hidden, intermediate_size=4 * args.hidden,
                         num_hidden_layers=args.layers, num_attention_heads=args.heads,
                         num_key_value_heads=args.heads, max_position_embeddings=max(2048, args.seq))
    config._attn_implementation = attn  # what from_pretrained(..., attn_implementation=attn) sets
    model = LlamaForCausalLM(config)
    model.train()
    data = torch.randint(0, VOCAB, (64, args.seq), generator=gen)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        optimizer.zero_grad(set_to_none=True)
        ids = data[torch.randint(0, data.shape[0], (args.batch_size,), generator=gen)]
        with cpu_autocast():
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        timer.step(args.batch_size)
    timer.report()


if __name__ == "__main__":
    main()
