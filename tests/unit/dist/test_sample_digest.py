"""Sample digests: do two ranks hold the same data? (stave.dist.sample_digest, sampling.content_match)."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import torch
from dist_factory import loader, record
from torch.utils.data import Dataset, TensorDataset

from stave.diagnose.rules import dist as rules
from stave.dist.sample_digest import RANDOM_COMPONENT, SAMPLES_DIGESTED, dataset_digests
from stave.dist.sampling import content_match


def shard(seed: int, rows: int = 64) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(rows, 8, generator=g), torch.randint(0, 10, (rows,), generator=g))


class Augmented(Dataset):
    """Features with random noise added on every read (an augmentation); labels as stored."""

    def __init__(self, base: TensorDataset) -> None:
        self.base = base

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int) -> dict:
        x, y = self.base[i]
        return {"x": x + torch.randn_like(x), "y": y, "mask": torch.ones(4)}


class LabelByIndex(Dataset):
    """Synthetic data whose label is the index's class by construction; features from the rank's seed."""

    def __init__(self, seed: int) -> None:
        self.x = np.random.default_rng(seed).standard_normal((32, 8)).astype(np.float32)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple:
        return self.x[i], i % 10


class Failing(TensorDataset):
    def __getitem__(self, i: int):
        if i >= 3:
            raise IndexError("remote store unavailable")
        return super().__getitem__(i)


def ranks_with(digests_by_rank: list[list[list[str]]]) -> list:
    perm = random.Random(0).sample(range(4096), 512)
    return [record(r, loaders=[dataclasses.replace(loader(perm, epoch=4096, sampler="RandomSampler"),
                                                   sample_digests=d)]) for r, d in enumerate(digests_by_rank)]


def test_digests_are_per_index_and_component_and_repeatable() -> None:
    d = dataset_digests(shard(0))
    assert len(d) == SAMPLES_DIGESTED and all(len(row) == 2 for row in d)
    assert d == dataset_digests(shard(0))
    assert d != dataset_digests(shard(1))
    assert len({row[0] for row in d}) == SAMPLES_DIGESTED  # different rows, different digests


def test_random_components_are_marked_and_the_script_rng_is_untouched() -> None:
    torch.manual_seed(123)
    np.random.seed(5)
    random.seed(7)
    expected = (torch.rand(3), np.random.rand(), random.random())
    torch.manual_seed(123)
    np.random.seed(5)
    random.seed(7)
    d = dataset_digests(Augmented(shard(0)))
    assert (torch.rand(3).tolist(), np.random.rand(), random.random()) == (expected[0].tolist(), *expected[1:])
    # dict keys in sorted order: mask, x, y
    assert all(row[1] == RANDOM_COMPONENT for row in d)
    assert all(row[2] != RANDOM_COMPONENT for row in d)


def test_a_failing_or_lengthless_dataset_keeps_what_was_read() -> None:
    base = shard(0)
    assert len(dataset_digests(Failing(*base.tensors))) == 3
    assert dataset_digests(iter([1, 2, 3])) == []


def test_same_data_matches_even_under_augmentation() -> None:
    assert content_match(ranks_with([dataset_digests(shard(0))] * 2), 0) is True
    aug = [dataset_digests(Augmented(shard(0))), dataset_digests(Augmented(shard(0)))]
    assert content_match(ranks_with(aug), 0) is True  # the labels agree, the noise is left out


def test_own_shards_do_not_match_even_when_labels_follow_the_index() -> None:
    assert content_match(ranks_with([dataset_digests(shard(0)), dataset_digests(shard(1))]), 0) is False
    by_index = [dataset_digests(LabelByIndex(0)), dataset_digests(LabelByIndex(1))]
    assert content_match(ranks_with(by_index), 0) is False


def test_nothing_informative_or_one_rank_says_nothing() -> None:
    constant = [[["a", RANDOM_COMPONENT]] * 8] * 2
    assert content_match(ranks_with(constant), 0) is None
    assert content_match(ranks_with([dataset_digests(shard(0))]), 0) is None
    assert content_match(ranks_with([[], []]), 0) is None


def test_in_memory_shards_are_correct_use_and_same_data_is_certain() -> None:
    # The planted control ddp_shards_healthy: each rank loads its own shard into a TensorDataset
    # with the same shuffle seed. Identical index streams, different samples: no finding.
    assert rules.no_distributed_sampler(ranks_with([dataset_digests(shard(0)), dataset_digests(shard(1))])) is None
    f = rules.no_distributed_sampler(ranks_with([dataset_digests(shard(0))] * 2))
    assert f is not None and f.certain and f.evidence["same_samples_proven"] is True
    assert f.evidence["same_sample_digests"] is True
