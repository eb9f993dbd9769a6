"""``gpt-char``: a small GPT (nanoGPT / llm.c style, seed 003) on a character-level corpus.

Definitions come from ``stave_examples.gpt_char`` (examples/gpt_char.py): Python's help topics as
the corpus, random windows as samples, AdamW with nanoGPT's weight-decay groups. Throughput is in
tokens/s (``block_size`` tokens per sample); ``--size`` sets the block size.
"""

from __future__ import annotations

from stave.bench.spec import JobSpec

NAME = "gpt-char"
DEFAULT_BLOCK = 128
BATCH_SIZE = 16
# Windows in the dataset: plenty of distinct batches for every batch size the ladder tries.
SAMPLES = 20000
# --quick: a two-layer, 64-wide model on 64-character windows (milliseconds per step).
QUICK_BLOCK = 64
QUICK_SAMPLES = 2048


def build(size: int | None = None, quick: bool = False) -> JobSpec:
    """The workload with ``size``-character windows (default 128)."""
    from stave_examples import gpt_char as gc

    block = size or (QUICK_BLOCK if quick else DEFAULT_BLOCK)
    dataset = gc.CharDataset(gc.load_corpus(), block, num_samples=QUICK_SAMPLES if quick else SAMPLES)
    if quick:
        config = gc.GPTConfig(vocab_size=dataset.vocab_size, block_size=block, n_layer=2, n_head=2, n_embd=64)
    else:
        config = gc.GPTConfig(vocab_size=dataset.vocab_size, block_size=block)

    def model() -> "gc.GPT":
        return gc.GPT(config)

    return JobSpec(
        name=NAME,
        model=model,
        dataset=dataset,
        loss=gc.lm_loss,
        optimizer=gc.build_optimizer,
        batch_size=BATCH_SIZE,
        num_workers=0,
        set_to_none=True,
        unit="tokens",
        items_per_sample=block,
        image_inputs=False,
        description=(
            f"GPT {config.n_layer}x{config.n_embd} ({config.n_head} heads) on characters of Python's help topics, "
            f"block {block}, batch {BATCH_SIZE}, AdamW (seed 003)"
        ),
    )
