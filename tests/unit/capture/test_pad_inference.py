"""The pad id of a plain model's token batches: from what the model or loss declares, or from row tails."""

from __future__ import annotations

import torch
from torch import nn

from stave.capture.pad_inference import (
    MIN_AGREEING_BATCHES,
    PadIdInference,
    declared_pad_id,
    padding_runs,
    tail_candidate,
)


def padded(lengths, width=32, pad=0, left=False, seed=0):
    """Rows of random ids in [5, 500) padded with ``pad`` to ``width``."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), width), pad, dtype=torch.long)
    for i, n in enumerate(lengths):
        row = torch.randint(5, 500, (n,), generator=gen)
        if left:
            ids[i, width - n:] = row
        else:
            ids[i, :n] = row
    return ids


def frequent_token_batch(token=7, share=0.3, rows=8, width=32, seed=0):
    """Unpadded rows in which ``token`` is very common (a space, 'the'), everywhere in the rows."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 500, (rows, width), generator=gen)
    ids[torch.rand(rows, width, generator=gen) < share] = token
    return ids


class Plain(nn.Module):
    def __init__(self, padding_idx=None):
        super().__init__()
        self.embed = nn.Embedding(500, 8, padding_idx=padding_idx)
        self.pos = nn.Embedding(64, 8)

    def forward(self, ids):
        return self.embed(ids).sum()


def test_declared_pad_from_config_then_embedding_padding_idx():
    model = Plain(padding_idx=3)
    assert declared_pad_id(model).pad_id == 3
    assert declared_pad_id(model).source == "embedding.padding_idx"
    model.config = type("Cfg", (), {"pad_token_id": 1})()
    assert declared_pad_id(model).source == "config.pad_token_id"
    assert declared_pad_id(Plain()) is None


def test_embeddings_that_disagree_declare_nothing():
    model = Plain(padding_idx=3)
    model.pos = nn.Embedding(64, 8, padding_idx=0)
    assert declared_pad_id(model) is None


def test_right_and_left_padding_runs_found():
    right = padded([5, 32, 10, 3])
    runs, tails = padding_runs(right, 0)
    assert tails is True
    assert runs.tolist() == [27, 0, 22, 29]
    left = padded([5, 32, 10, 3], left=True, pad=2)
    runs, tails = padding_runs(left, 2)
    assert tails is False
    assert tail_candidate(left) == 2


def test_a_merely_frequent_token_is_not_padding():
    for seed in range(5):
        batch = frequent_token_batch(seed=seed)
        assert padding_runs(batch, 7) is None
        assert tail_candidate(batch) is None


def test_an_id_that_pads_but_also_fills_the_rows_is_not_padding():
    ids = padded([10, 12, 8, 9], pad=0)
    ids[:, 1:6] = 0  # the same id all over the rows' content
    assert padding_runs(ids, 0) is None


def test_observed_pad_needs_agreeing_batches_and_is_cpu_only():
    model = Plain()
    pads = PadIdInference()
    seen = [pads.pad_id(model, padded([4, 20, 9, 31], seed=s)) for s in range(MIN_AGREEING_BATCHES)]
    assert seen[:-1] == [None] * (MIN_AGREEING_BATCHES - 1)
    assert seen[-1] == 0
    assert pads.evidence.source == "row tails"


def test_full_batches_do_not_break_the_streak_but_the_id_inside_rows_does():
    model = Plain()
    pads = PadIdInference()
    pads.pad_id(model, padded([4, 20, 9, 31], seed=0))
    pads.pad_id(model, padded([32, 32, 32, 32], seed=1))  # no padding in this batch: neutral
    pads.pad_id(model, padded([8, 2, 30, 12], seed=2))
    assert pads.pad_id(model, padded([5, 6, 7, 8], seed=3)) == 0
    other = PadIdInference()
    other.pad_id(model, padded([4, 20, 9, 31], seed=0))
    other.pad_id(model, padded([4, 20, 9, 31], seed=1))
    inside = frequent_token_batch(token=0, share=0.1)  # 0 now appears inside rows, no tails
    assert other.pad_id(model, inside) is None
    assert other.pad_id(model, padded([4, 20, 9, 31], seed=2)) is None  # the streak started over


def test_frequent_token_batches_never_give_a_pad_id():
    model = Plain()
    pads = PadIdInference()
    for seed in range(2 * MIN_AGREEING_BATCHES):
        assert pads.pad_id(model, frequent_token_batch(seed=seed)) is None
    assert pads.evidence is None


def test_loss_ignore_index_confirmed_by_one_padded_batch():
    model = Plain()
    pads = PadIdInference()
    # -100 (PyTorch's default) is no token id; 1 is, and it pads this batch.
    assert pads.pad_id(model, padded([4, 20, 9, 31], pad=1), loss_ids={1}) == 1
    assert pads.evidence.source == "loss.ignore_index"
    unconfirmed = PadIdInference()
    assert unconfirmed.pad_id(model, frequent_token_batch(token=1), loss_ids={1}) is None


def test_loss_modules_inside_the_model_count():
    model = Plain()
    model.loss = nn.CrossEntropyLoss(ignore_index=2)
    assert PadIdInference().pad_id(model, padded([4, 20, 9, 31], pad=2)) == 2


def test_watch_counts_real_tokens_of_a_plain_model_without_mask_or_pad_id():
    import stave

    torch.manual_seed(0)
    model = Plain()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    lengths = [4, 20, 9, 31]
    with stave.watch(warmup=MIN_AGREEING_BATCHES, probes=False) as run:
        for step in range(MIN_AGREEING_BATCHES + 3):
            model(padded(lengths, seed=step)).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    rec = run.record
    assert rec.config.pad_token_id == 0
    assert rec.config.pad_token_source == "row tails"
    for s in rec.counted_steps():
        assert (s.tokens, s.real_tokens) == (4 * 32, sum(lengths))
