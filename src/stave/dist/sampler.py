"""Record the first sample indices each DataLoader's sampler yields on this rank.

Comparing these streams across ranks shows whether the ranks read the same samples (no sharding)
whatever the sampler's class: a custom shard-aware sampler yields disjoint streams and raises no
alarm, a plain RandomSampler seeded alike on every rank yields identical ones.

How: ``DataLoader._index_sampler`` (the property every DataLoader iterator reads its sampler
from) is patched to hand out a thin recording wrapper for the first iterator of each loader;
once :data:`MAX_FIRST_INDICES` indices are recorded, loaders get their own sampler back untouched.
Recording draws no random numbers and changes no index, so the user's order is unchanged.
"""

from __future__ import annotations

import logging
import numbers
from typing import Any, Callable, Iterator

from torch.utils.data import dataloader as dl

from stave.dist.sample_digest import dataset_digests
from stave.measure.config import LoaderInfo

log = logging.getLogger(__name__)

# Indices kept per loader: two ranks drawing independently from n samples share about K*K/n of
# their first K, so 512 shows unsharded random streams up to datasets of ~100k samples by overlap
# alone (larger ones are caught by the epoch size), while staying ~3 KB in the record.
MAX_FIRST_INDICES = 512


class _Recording:
    """Wraps an index sampler (or batch sampler): yields exactly what it yields, noting the first indices."""

    def __init__(self, inner: Any, sink: list[int]) -> None:
        self._inner = inner
        self._sink = sink

    def __iter__(self) -> Iterator[Any]:
        it = iter(self._inner)
        if len(self._sink) >= MAX_FIRST_INDICES:
            return it
        return self._record(it)

    def _record(self, it: Iterator[Any]) -> Iterator[Any]:
        sink = self._sink
        for item in it:
            if not _note(sink, item):
                yield item
                break
            yield item
            if len(sink) >= MAX_FIRST_INDICES:
                break
        yield from it

    def __len__(self) -> int:
        return len(self._inner)

    def __getattr__(self, name: str) -> Any:
        if name in ("_inner", "_sink"):  # not set yet (copy/unpickle): no recursion
            raise AttributeError(name)
        return getattr(self._inner, name)


def _note(sink: list[int], item: Any) -> bool:
    """Append the index (or the batch's indices); False when the sampler yields something else."""
    if isinstance(item, numbers.Integral) and not isinstance(item, bool):
        sink.append(int(item))
        return True
    if isinstance(item, (list, tuple)) and all(
            isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in item):
        room = MAX_FIRST_INDICES - len(sink)
        sink.extend(int(i) for i in item[:room])
        return True
    return False


def epoch_samples(loader: Any) -> int | None:
    """Samples one epoch of ``loader``'s sampler yields on this rank, when its sampler says."""
    try:
        if loader.batch_sampler is not None:
            inner = getattr(loader.batch_sampler, "sampler", None)
            if inner is not None and type(loader.batch_sampler).__name__ == "BatchSampler":
                return int(len(inner))
            return None  # a custom batch sampler: its len() counts batches, not samples
        return int(len(loader.sampler))
    except (TypeError, NotImplementedError, AttributeError):
        return None


class IndexRecorder:
    """Installs the ``_index_sampler`` patch; ``info_of(loader)`` finds the loader's LoaderInfo."""

    def __init__(self, info_of: Callable[[Any], LoaderInfo | None]) -> None:
        self.info_of = info_of
        self._original: Any = None

    def install(self) -> None:
        """Patch ``DataLoader._index_sampler``."""
        original = dl.DataLoader.__dict__.get("_index_sampler")
        if not isinstance(original, property) or original.fget is None:
            log.info("DataLoader._index_sampler is not a property in this torch: sample indices not recorded")
            return
        self._original = original
        getter = original.fget
        recorder = self

        def index_sampler(loader: Any) -> Any:
            inner = getter(loader)
            try:
                info = recorder.info_of(loader)
            except (AttributeError, KeyError):
                return inner
            if info is None or len(info.first_indices) >= MAX_FIRST_INDICES or info.iterable_dataset:
                return inner
            if info.epoch_samples is None:
                info.epoch_samples = epoch_samples(loader)
            if not info.first_indices and not info.sample_digests and not info.dataset_paths:
                # No files tell the ranks' data apart: fingerprint the samples themselves.
                info.sample_digests = dataset_digests(loader.dataset)
            return _Recording(inner, info.first_indices)

        dl.DataLoader._index_sampler = property(index_sampler)  # type: ignore[method-assign]

    def uninstall(self) -> None:
        """Restore the original property."""
        if self._original is not None:
            dl.DataLoader._index_sampler = self._original  # type: ignore[method-assign]
            self._original = None
