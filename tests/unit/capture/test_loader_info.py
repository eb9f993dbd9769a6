"""What the doctor reads from a DataLoader: the class that orders the samples, whatever batches them."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from stave.capture.config_probe import loader_info


class LengthGroupedBatches:
    """A custom batch sampler written the way users write them: no ``sampler`` attribute."""

    def __init__(self, n: int, batch_size: int) -> None:
        self.n, self.batch_size = n, batch_size

    def __iter__(self):
        order = list(range(self.n))
        return iter([order[i:i + self.batch_size] for i in range(0, self.n, self.batch_size)])

    def __len__(self) -> int:
        return (self.n + self.batch_size - 1) // self.batch_size


def _dataset() -> TensorDataset:
    return TensorDataset(torch.zeros(16, 3))


def test_a_custom_batch_sampler_without_a_sampler_is_named_itself():
    info = loader_info(DataLoader(_dataset(), batch_sampler=LengthGroupedBatches(16, 4)), 0)
    assert info.sampler_type == "LengthGroupedBatches" and info.batch_size is None


def test_the_inner_sampler_of_the_default_batch_sampler_is_named():
    assert loader_info(DataLoader(_dataset(), batch_size=4, shuffle=True), 0).sampler_type == "RandomSampler"
    sampler = DistributedSampler(_dataset(), num_replicas=2, rank=0)
    assert loader_info(DataLoader(_dataset(), batch_size=4, sampler=sampler), 0).sampler_type == "DistributedSampler"
    assert loader_info(DataLoader(_dataset(), batch_size=None), 0).sampler_type == "SequentialSampler"
