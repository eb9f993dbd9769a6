"""DeviceLoader: wraps any iterable of batches; copies batch N+1 to the device while batch N computes.

The prefetcher pattern (Apex, timm): the next batch is copied on a side stream with
``non_blocking=True`` (asynchronous only from pinned memory, so pin in the loader), images are
converted and normalized on the device, the compute stream waits for the side stream before the
batch is handed out, and every tensor records the compute stream so the caching allocator does not
reuse its memory early. On a CPU device the same code runs: the stream is ``None`` and every
stream call is a no-op (:mod:`stave.device`). Images travel as uint8 (a quarter of float32's
bytes); the float conversion happens on the device.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch

from stave import device as dev
from stave.errors import UsageError

log = logging.getLogger(__name__)


class Normalizer:
    """``(x / 255 - mean) / std`` for uint8 images (``(x - mean) / std`` for float), cast to ``dtype``.

    ``mean``/``std`` are per-channel in [0, 1] units, as torchvision's ``Normalize`` takes them.
    """

    def __init__(
        self,
        mean: Sequence[float] | None,
        std: Sequence[float] | None,
        dtype: torch.dtype | None,
        channels_last: bool,
    ) -> None:
        if (mean is None) != (std is None):
            raise UsageError("give both mean and std, or neither")
        if std is not None and any(s == 0 for s in std):
            raise UsageError(f"std must not contain 0, got {list(std)}")
        self.mean = None if mean is None else torch.tensor(mean, dtype=torch.float64)
        self.std = None if std is None else torch.tensor(std, dtype=torch.float64)
        self.dtype = dtype
        self.channels_last = channels_last
        self._cache: dict[tuple[Any, ...], tuple[torch.Tensor, torch.Tensor]] = {}

    def _constants(self, x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        key = (x.device, dtype, x.dtype, x.shape[1])
        if key not in self._cache:
            assert self.mean is not None and self.std is not None
            if len(self.mean) != x.shape[1]:
                raise UsageError(f"mean/std have {len(self.mean)} channels, the images have {x.shape[1]} (expected NCHW)")
            scale = 255.0 if x.dtype == torch.uint8 else 1.0
            shape = (1, x.shape[1], 1, 1)
            # Computed in float64 then cast once: x * inv_std - mean/std, with the /255 folded in.
            inv = (1.0 / (self.std * scale)).to(dtype).view(shape).to(x.device)
            shift = (self.mean / self.std).to(dtype).view(shape).to(x.device)
            self._cache[key] = (inv, shift)
        return self._cache[key]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Normalize a 4-D NCHW image batch (any memory layout) on its device."""
        if x.dim() != 4:
            return x
        memory_format = torch.channels_last if self.channels_last else torch.contiguous_format
        if self.mean is None:
            target = self.dtype or x.dtype
            return x.to(dtype=target, memory_format=memory_format)
        dtype = self.dtype or torch.float32
        if not dtype.is_floating_point:
            raise UsageError(f"normalized images need a floating dtype, got {dtype}")
        inv, shift = self._constants(x, dtype)
        out = torch.empty(x.shape, dtype=dtype, device=x.device, memory_format=memory_format)
        out.copy_(x)  # cast and layout change in one pass
        out.mul_(inv).sub_(shift)
        return out


def _rebuild(batch: list[Any] | tuple[Any, ...], items: list[Any]) -> Any:
    """A container like ``batch`` holding ``items`` (namedtuples keep their type; other tuples become tuples)."""
    if isinstance(batch, list):
        return items
    if hasattr(batch, "_fields"):
        return type(batch)(*items)
    return tuple(items)


def _map_tensors(batch: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, (list, tuple)):
        return _rebuild(batch, [_map_tensors(item, fn) for item in batch])
    if isinstance(batch, dict):
        return {key: _map_tensors(value, fn) for key, value in batch.items()}
    return batch


def _apply_to_images(batch: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """Apply ``fn`` to the image tensor: the batch itself, its first element, or its 'image(s)' key."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], torch.Tensor):
        return _rebuild(batch, [fn(batch[0]), *batch[1:]])
    if isinstance(batch, dict):
        for key in ("image", "images", "input", "inputs"):
            if isinstance(batch.get(key), torch.Tensor):
                return {**batch, key: fn(batch[key])}
    return batch


class DeviceLoader:
    """Iterate ``loader`` with batches already on ``device``, normalized, prefetched one ahead.

    ``mean``/``std`` (in [0, 1] units) normalize the images (the tensor itself, a batch's first
    element, or a dict's ``image``/``images`` entry; NCHW); uint8 images are scaled by 1/255 first.
    ``dtype`` is the images' output dtype (float32 when normalizing and not given);
    ``channels_last`` returns them in NHWC memory. Other tensors are only moved.
    """

    def __init__(
        self,
        loader: Iterable[Any],
        device: str | torch.device | None = None,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        channels_last: bool = False,
        dtype: torch.dtype | None = None,
        *,
        on_copied: Callable[[Any, Any], None] | None = None,
    ) -> None:
        self.loader = loader
        self.device = dev.resolve_device(device)
        self.normalize = Normalizer(mean, std, dtype, channels_last)
        self._on_copied = on_copied
        self._warned_pageable = False

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.device.type == "cuda" and tensor.device.type == "cpu" and not self._warned_pageable and not dev.is_pinned(tensor):
            self._warned_pageable = True
            log.info("DeviceLoader: host batches are not pinned, so copies cannot overlap compute; use pin_memory=True")
        # non_blocking: from pinned memory the copy runs on the side stream while the host moves on.
        return tensor.to(self.device, non_blocking=True)

    def _preload(self, iterator: Iterator[Any], stream: Any) -> Any:
        host_batch = next(iterator)
        with dev.stream_context(stream):
            batch = _map_tensors(host_batch, self._to_device)
            if self._on_copied is not None:
                self._on_copied(host_batch, dev.record_event(stream))
            batch = _apply_to_images(batch, self.normalize)
        return batch

    def __iter__(self) -> Iterator[Any]:
        stream = dev.new_stream(self.device)
        iterator = iter(self.loader)
        try:
            upcoming = self._preload(iterator, stream)
        except StopIteration:
            return
        while True:
            # The compute stream must not read the batch before the side stream has written it.
            dev.wait_stream(stream)
            batch = upcoming
            _map_tensors(batch, lambda t: (dev.record_stream(t), t)[1])
            try:
                upcoming = self._preload(iterator, stream)
            except StopIteration:
                yield batch
                return
            yield batch
