"""Recording the first sample indices of each DataLoader without changing what it yields."""

from __future__ import annotations

from typing import Any

import torch
from dist_factory import loader as loader_info
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, SequentialSampler
from torch.utils.data import dataloader as dl
from torch.utils.data.distributed import DistributedSampler

from stave.dist.sampler import MAX_FIRST_INDICES, IndexRecorder, epoch_samples


class Indexed(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(10))


def run(make_loader, epochs: int = 2) -> tuple[list[list[int]], list[list[int]], Any]:
    """Batches per epoch without and with the recorder, and the LoaderInfo it filled."""
    plain = [[int(v) for b in make_loader() for v in b] for _ in range(1)]
    infos: dict[int, Any] = {}
    rec = IndexRecorder(lambda ld: infos.setdefault(id(ld), loader_info([], epoch=None)))
    rec.install()
    try:
        ld = make_loader()
        seen = [[int(v) for b in ld for v in b] for _ in range(epochs)]
    finally:
        rec.uninstall()
    return plain, seen, infos.get(id(ld))


def test_first_indices_are_recorded_and_the_order_is_unchanged() -> None:
    def make() -> DataLoader:
        torch.manual_seed(7)
        return DataLoader(Indexed(2000), batch_size=32, shuffle=True)

    plain, seen, info = run(make)
    assert seen[0] == plain[0]  # same seed, same order: recording drew nothing from the generator
    assert info.first_indices == seen[0][:MAX_FIRST_INDICES]
    assert info.epoch_samples == 2000
    assert len(seen[1]) == 2000  # later epochs run unwrapped, complete


def test_distributed_sampler_epoch_is_the_shard() -> None:
    data = Indexed(1001)
    ld = DataLoader(data, batch_size=8, sampler=DistributedSampler(data, num_replicas=4, rank=1, shuffle=False))
    assert epoch_samples(ld) == 251
    custom = DataLoader(data, batch_sampler=[[1, 2], [3, 4]])
    assert epoch_samples(custom) is None  # a custom batch sampler counts batches, not samples


def test_custom_batch_sampler_and_unbatched_loaders_are_recorded() -> None:
    def make() -> DataLoader:
        return DataLoader(Indexed(100), batch_sampler=BatchSampler(SequentialSampler(range(100)), 10, False))

    _, seen, info = run(make, epochs=1)
    assert info.first_indices == list(range(100)) and seen[0] == list(range(100))

    infos: dict[int, Any] = {}
    rec = IndexRecorder(lambda ld: infos.setdefault(id(ld), loader_info([], epoch=None)))
    rec.install()
    try:
        unbatched = DataLoader(Indexed(50), batch_size=None)  # the sampler yields single indices
        assert [int(x) for x in unbatched] == list(range(50))
    finally:
        rec.uninstall()
    assert infos[id(unbatched)].first_indices == list(range(50))
    assert infos[id(unbatched)].epoch_samples == 50


def test_iterable_datasets_are_left_alone_and_the_property_is_restored() -> None:
    original = dl.DataLoader.__dict__["_index_sampler"]
    infos: dict[int, Any] = {}

    def info_of(ld: Any) -> Any:
        return infos.setdefault(id(ld), loader_info([], epoch=None))

    rec = IndexRecorder(info_of)
    rec.install()
    try:
        ld = DataLoader(Stream(), batch_size=2)
        infos[id(ld)] = loader_info([], epoch=None)
        infos[id(ld)].iterable_dataset = True
        assert [int(v) for b in ld for v in b] == list(range(10))
        assert infos[id(ld)].first_indices == []
    finally:
        rec.uninstall()
    assert dl.DataLoader.__dict__["_index_sampler"] is original


def test_loader_workers_see_the_same_indices() -> None:
    def make() -> DataLoader:
        torch.manual_seed(3)
        return DataLoader(Indexed(300), batch_size=16, shuffle=True, num_workers=2)

    plain, seen, info = run(make, epochs=1)
    assert seen[0] == plain[0] and info.first_indices == seen[0]
