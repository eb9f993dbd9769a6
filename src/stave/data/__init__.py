"""stave.data: packed datasets, crop-aware libjpeg-turbo decode and a device-side prefetching loader.

Each part works alone and with the plain torch ``DataLoader``:

* :func:`pack` / ``stave pack SRC DST``: an ImageFolder tree, a CSV/JSONL list or any map-style
  dataset into stave's sharded, memory-mappable format (docs/format.md).
* :class:`PackedDataset`: a packed dataset as a map-style dataset.
* :class:`ImageLoader`: packed dataset -> crop-aware decode in threads -> uint8 batches -> device.
* :class:`DeviceLoader`: wraps any loader; copies the next batch to the device while this one
  computes, normalizes there.
* :mod:`stave.data.synth`: the ImageNet-like JPEG generator the benchmark uses.

Imports are lazy so ``import stave.data`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["DeviceLoader", "ImageLoader", "PackedDataset", "pack", "verify", "synth", "benchmark"]

_EXPORTS = {
    "DeviceLoader": ("stave.data.device_loader", "DeviceLoader"),
    "ImageLoader": ("stave.data.loader", "ImageLoader"),
    "PackedDataset": ("stave.data.dataset", "PackedDataset"),
    "pack": ("stave.data.writer", "pack"),
    "verify": ("stave.data.dataset", "verify"),
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        module, attr = _EXPORTS[name]
        return getattr(importlib.import_module(module), attr)
    if name in ("synth", "benchmark"):
        return importlib.import_module(f"stave.data.{name}")
    raise AttributeError(f"module 'stave.data' has no attribute {name!r}")
