"""Batches of any structure: tensors found, samples and tokens counted (real ones from the mask)."""

from __future__ import annotations

from collections import UserDict, namedtuple
from dataclasses import dataclass

import pytest
import torch

from stave.capture import config_probe
from stave.capture.batch_walk import (
    TokenCount,
    TokenTotals,
    batch_samples,
    count_tokens,
    find_tokens,
    iter_tensors,
)


@dataclass
class Batch:
    pixels: torch.Tensor
    meta: dict


Pair = namedtuple("Pair", ["inputs", "target"])


def lm_batch(rows: int = 4, width: int = 10, lengths=(3, 10, 5, 1)) -> dict:
    ids = torch.randint(1, 100, (rows, width))
    mask = torch.zeros(rows, width, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.clone()}


def test_walks_mappings_dataclasses_named_tuples_and_nesting():
    batch = Pair(Batch(torch.zeros(2, 3), {"extra": [torch.ones(5), torch.ones(1, 1)]}), torch.zeros(2))
    paths = [p for p, _t in iter_tensors(batch)]
    assert paths == ["batch.inputs.pixels", "batch.inputs.meta['extra'][0]", "batch.inputs.meta['extra'][1]",
                     "batch.target"]


def test_batch_encoding_like_userdict_counts_its_rows_not_one():
    # transformers' BatchEncoding is a UserDict, not a dict: the old walk gave 1 sample per batch.
    batch = UserDict(lm_batch(rows=16, width=8, lengths=[8] * 16))
    assert batch_samples(batch, fallback=None) == 16
    assert config_probe.batch_samples(batch, None) == 16
    infos = config_probe.batch_tensors(batch)
    assert [i.path for i in infos] == ["batch['input_ids']", "batch['attention_mask']", "batch['labels']"]


def test_samples_fall_back_to_first_tensor_then_loader_size():
    assert batch_samples((torch.zeros(7, 3, 4, 4), torch.zeros(7)), fallback=32) == 7
    assert batch_samples({"no": "tensors"}, fallback=32) == 32
    assert batch_samples([], fallback=None) == 1


def test_find_tokens_by_name_then_by_shape():
    b = lm_batch()
    ids, mask = find_tokens(list(iter_tensors(b)))
    assert ids is b["input_ids"] and mask is b["attention_mask"]
    # nanoGPT: forward(idx, targets) with positional names from the signature
    idx, targets = torch.randint(0, 50, (2, 16)), torch.randint(0, 50, (2, 16))
    ids, mask = find_tokens([("idx", idx), ("targets", targets)])
    assert ids is idx and mask is None
    # no names: the first integer matrix; float images are not tokens
    ids, _ = find_tokens([("args[0]", torch.zeros(2, 3, 8, 8)), ("args[1]", idx)])
    assert ids is idx
    assert find_tokens([("x", torch.zeros(4, 16))]) == (None, None)


def test_count_tokens_from_mask_and_from_pad_id():
    b = lm_batch()
    c = count_tokens(b["input_ids"], b["attention_mask"])
    assert (c.rows, c.width, c.tokens, c.row_lengths) == (4, 10, 40, [3, 10, 5, 1])
    ids = torch.tensor([[5, 6, 0, 0], [7, 0, 0, 0]])
    assert count_tokens(ids, None, pad_id=0).row_lengths == [2, 1]
    assert count_tokens(ids, None).row_lengths is None


def test_token_totals_real_longest_and_squares():
    totals = TokenTotals()
    totals.add(TokenCount(4, 10, [3, 10, 5, 1]))
    totals.add(TokenCount(2, 8, torch.tensor([2, 4])))  # a device-side count resolved later
    totals.add(TokenCount(1, 6, None))  # nothing says what is padding: all real
    assert totals.tokens == 40 + 16 + 6
    assert totals.real_tokens == 19 + 6 + 6
    assert totals.longest_tokens == 4 * 10 + 2 * 4 + 6
    assert totals.token_sq == 4 * 100 + 2 * 64 + 36
    assert totals.real_token_sq == (9 + 100 + 25 + 1) + (4 + 16) + 36
    assert totals.longest_token_sq == 4 * 100 + 2 * 16 + 36


@pytest.mark.parametrize("bad", [torch.zeros(3, dtype=torch.long), torch.zeros(3, 1, dtype=torch.long)])
def test_label_vectors_and_single_columns_are_not_tokens(bad):
    assert find_tokens([("input_ids", bad)]) == (None, None)


@pytest.mark.cuda
def test_cuda_mask_lengths_are_copied_to_pinned_memory_without_a_sync():
    b = {k: v.cuda() for k, v in lm_batch().items()}
    c = count_tokens(b["input_ids"], b["attention_mask"])
    assert isinstance(c.row_lengths, torch.Tensor) and c.row_lengths.device.type == "cpu"
    assert c.row_lengths.is_pinned()
    torch.cuda.synchronize()  # what the step's end event guarantees when the step is resolved
    totals = TokenTotals()
    totals.add(c)
    assert totals.real_tokens == 19
