"""Which samples a rank reads in an epoch, and in which batches: pure functions of the loader's state.

Every epoch is a fresh full permutation drawn from ``(seed, epoch)`` (identical on every rank, no
communication needed). Each rank takes a contiguous, disjoint slice of it of exactly
``len // world_size`` samples, so every rank runs the same number of batches and none waits at an
uneven tail; the at most ``world_size - 1`` samples left over differ from epoch to epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stave.errors import UsageError


@dataclass(frozen=True)
class OrderSpec:
    """Everything that fixes the sample order; validated once."""

    num_samples: int
    batch_size: int
    shuffle: bool
    drop_last: bool
    seed: int
    rank: int
    world_size: int

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise UsageError(f"batch_size must be at least 1, got {self.batch_size}")
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise UsageError(f"rank must be in 0..world_size-1, got rank {self.rank} of world_size {self.world_size}")
        if self.num_samples // self.world_size == 0:
            raise UsageError(f"{self.num_samples} samples cannot be split over {self.world_size} ranks")

    @property
    def per_rank(self) -> int:
        """Samples each rank reads per epoch."""
        return self.num_samples // self.world_size

    @property
    def num_batches(self) -> int:
        """Batches per epoch on every rank."""
        full, rest = divmod(self.per_rank, self.batch_size)
        return full if (self.drop_last or rest == 0) else full + 1


def epoch_permutation(num_samples: int, seed: int, epoch: int) -> np.ndarray:
    """The epoch's permutation of ``0..num_samples-1``, a pure function of (seed, epoch)."""
    rng = np.random.default_rng([seed & 0xFFFFFFFF, epoch & 0xFFFFFFFF, 0x5A7E])
    return rng.permutation(num_samples)


def rank_indices(spec: OrderSpec, epoch: int) -> np.ndarray:
    """The dataset indices this rank reads in ``epoch``, in order."""
    order = epoch_permutation(spec.num_samples, spec.seed, epoch) if spec.shuffle else np.arange(spec.num_samples)
    start = spec.rank * spec.per_rank
    return order[start : start + spec.per_rank]


def batch_indices(spec: OrderSpec, epoch: int, batch: int, indices: np.ndarray | None = None) -> np.ndarray:
    """Dataset indices of batch number ``batch`` of ``epoch`` on this rank."""
    if not 0 <= batch < spec.num_batches:
        raise IndexError(f"batch {batch} out of range 0..{spec.num_batches - 1}")
    indices = rank_indices(spec, epoch) if indices is None else indices
    return indices[batch * spec.batch_size : (batch + 1) * spec.batch_size]


def batch_rng(seed: int, epoch: int, rank: int, batch: int) -> np.random.Generator:
    """The generator for one batch's augmentation, so a resumed run augments identically."""
    return np.random.default_rng([seed & 0xFFFFFFFF, epoch & 0xFFFFFFFF, rank, batch, 0xA06])
