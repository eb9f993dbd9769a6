"""Do the ranks read the same samples? Compare their loaders' first indices and epoch sizes.

Two behaviours betray a loader that is not sharded across ranks, whatever its sampler's class:

- overlapping index streams: shards of a sharded sampler are disjoint by construction (a
  DistributedSampler pads its last shard with at most ``world_size - 1`` repeated indices), so
  more shared indices than that among the ranks' first indices means they draw from the same pool;
  identical streams (the same seed on every rank) share all of them;
- the epoch size: a sharded sampler yields about ``len(dataset) / world_size`` samples per epoch on
  each rank; ranks that each yield the whole dataset cover it ``world_size`` times per epoch.

Loaders are matched across ranks by creation order (``loader_id``), which is the same on every rank
of an SPMD script.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

from stave.measure.config import LoaderInfo
from stave.measure.record import RunRecord

# A sample component whose two reads differed (drawn at random): stave.dist.sample_digest writes it.
RANDOM_COMPONENT = "~"


@dataclass
class LoaderOverlap:
    """How one loader's index streams relate across the ranks that recorded them.

    ``shared_indices``: indices drawn by more than one rank among each rank's first
    ``indices_per_rank`` (counted once per extra rank that drew them);
    ``unique_fraction``: distinct indices over all drawn (1.0: disjoint; 1/ranks: identical streams);
    ``coverage``: per epoch, the ranks' samples together over the dataset size (about 1 when
    sharded, about ``ranks`` when every rank reads everything); ``None`` when not known.
    """

    loader_id: int
    ranks: list[int]
    dataset_type: str
    sampler_type: str
    dataset_len: int | None
    indices_per_rank: int
    shared_indices: int
    unique_fraction: float
    padding_allowance: int
    epoch_samples: list[int | None]
    coverage: float | None
    batches: int


def _loader(record: RunRecord, loader_id: int) -> LoaderInfo | None:
    for info in record.config.loaders:
        if info.loader_id == loader_id:
            return info
    return None


def loader_overlap(records: Sequence[RunRecord], loader_id: int) -> LoaderOverlap | None:
    """Compare one loader across ranks; ``None`` when fewer than two ranks recorded its indices."""
    pairs = [(r.run.rank, _loader(r, loader_id)) for r in records]
    found = [(rank, info) for rank, info in pairs if info is not None and info.first_indices]
    if len(found) < 2:
        return None
    k = min(len(info.first_indices) for _, info in found)
    sets = [set(info.first_indices[:k]) for _, info in found]
    drawn = sum(len(s) for s in sets)
    union = set().union(*sets)
    first = found[0][1]
    n = first.dataset_len
    epochs = [info.epoch_samples for _, info in found]
    coverage = None
    if n and all(e is not None for e in epochs):
        # Only the ranks seen here are counted; the others are assumed to behave like them.
        world = max(r.run.world_size for r in records)
        mean_epoch = sum(e for e in epochs if e is not None) / len(epochs)
        coverage = mean_epoch * world / n
    return LoaderOverlap(
        loader_id=loader_id,
        ranks=[rank for rank, _ in found],
        dataset_type=first.dataset_type,
        sampler_type=first.sampler_type,
        dataset_len=n,
        indices_per_rank=k,
        shared_indices=drawn - len(union),
        unique_fraction=len(union) / drawn if drawn else 1.0,
        padding_allowance=len(found) - 1,
        epoch_samples=epochs,
        coverage=coverage,
        batches=int(statistics.median(info.batches for _, info in found)),
    )


def sample_overlaps(records: Sequence[RunRecord]) -> list[LoaderOverlap]:
    """Every loader that at least two ranks recorded, the busiest (most batches) first."""
    ids = sorted({info.loader_id for r in records for info in r.config.loaders})
    out = [o for o in (loader_overlap(records, i) for i in ids) if o is not None]
    return sorted(out, key=lambda o: -o.batches)


def content_match(records: Sequence[RunRecord], loader_id: int) -> bool | None:
    """Do the ranks hold the same samples at the same indices? From ``LoaderInfo.sample_digests``.

    Compares each component that is deterministic (the same on both reads of a rank) and varies
    across the digested indices (a constant field, a mask of ones, says nothing): ``True`` when every
    such component is equal on every rank at every digested index (the same data, any random
    augmentation aside), ``False`` when one differs (each rank holds its own data, e.g. its own
    shard), ``None`` when fewer than two ranks digested this loader or nothing informative is left.
    """
    digests = [info.sample_digests for r in records
               if (info := _loader(r, loader_id)) is not None and info.sample_digests]
    if len(digests) < 2:
        return None
    n = min(len(d) for d in digests)
    width = {len(row) for d in digests for row in d[:n]}
    if n < 2 or len(width) != 1:
        return None  # too few indices, or samples of different structure: not comparable component-wise
    informative = False
    for j in range(width.pop()):
        columns = [[row[j] for row in d[:n]] for d in digests]
        if any(RANDOM_COMPONENT in col for col in columns):
            continue  # drawn at random on some rank: no evidence either way
        if len(set(columns[0])) < 2 and all(col == columns[0] for col in columns):
            continue  # the same constant on every rank
        informative = True
        if any(col != columns[0] for col in columns[1:]):
            return False
    return True if informative else None
