"""Reading a packed dataset: the manifest, memory-mapped shards, O(1) sample access, verification.

:class:`PackedDataset` is a map-style ``torch.utils.data.Dataset`` (works with a plain
``DataLoader``, thread or process workers). Each shard is opened, its header and index checked
against the real file (see :mod:`stave.data.format`), then memory-mapped; a sample is a slice of
that mapping. Mappings are reopened lazily after pickling, so process workers (fork or spawn) work.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import torch
from PIL import Image

from stave.data import format as fmt
from stave.data.decode import decode_full, get_backend
from stave.errors import FormatError, InputError

log = logging.getLogger(__name__)

# A manifest lists shards and skipped files; 64 MiB holds millions of entries and bounds the parse.
MAX_MANIFEST_BYTES = 64 << 20
OUTPUTS = ("pil", "numpy", "tensor", "bytes")


@dataclass(frozen=True)
class ShardInfo:
    """A shard as the manifest lists it."""

    file: str
    num_samples: int
    bytes: int


@dataclass(frozen=True)
class Manifest:
    """The parsed ``manifest.json`` of a packed dataset."""

    num_samples: int
    shards: tuple[ShardInfo, ...]
    classes: tuple[str, ...] | None
    encoding: str
    skipped: tuple[dict[str, str], ...]
    options: dict[str, Any]


def _require(cond: bool, path: Path, what: str) -> None:
    if not cond:
        raise FormatError(f"{path}: {what}")


def read_manifest(root: str | os.PathLike[str]) -> Manifest:
    """Load and validate ``root/manifest.json`` (a missing one means the pack never finished)."""
    root = Path(root)
    path = root / fmt.MANIFEST_NAME
    if not root.is_dir():
        raise InputError(f"{root}: no such packed dataset directory; create one with `stave pack SRC {root}`")
    if not path.is_file():
        partial = any(root.glob("*" + fmt.SHARD_SUFFIX)) or any(root.glob("*.partial"))
        hint = "the pack was interrupted; re-run the same `stave pack` to resume" if partial else "not a packed dataset"
        raise InputError(f"{root}: no {fmt.MANIFEST_NAME} ({hint})")
    size = path.stat().st_size
    _require(size <= MAX_MANIFEST_BYTES, path, f"manifest is {size} bytes, over the {MAX_MANIFEST_BYTES} byte limit")
    try:
        obj = json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise FormatError(f"{path}: not valid JSON ({exc})") from exc
    _require(isinstance(obj, dict), path, "top level is not an object")
    _require(obj.get("format") == fmt.MANIFEST_FORMAT, path, f"format is {obj.get('format')!r}, expected {fmt.MANIFEST_FORMAT!r}")
    _require(obj.get("version") == fmt.FORMAT_VERSION, path, f"version {obj.get('version')!r}; this stave reads {fmt.FORMAT_VERSION}")
    shards_obj = obj.get("shards")
    _require(isinstance(shards_obj, list), path, "'shards' is not a list")
    shards = []
    for i, entry in enumerate(shards_obj):
        _require(isinstance(entry, dict), path, f"shards[{i}] is not an object")
        name = entry.get("file")
        _require(
            isinstance(name, str) and name == Path(name).name and name.endswith(fmt.SHARD_SUFFIX) and not name.startswith("."),
            path,
            f"shards[{i}].file {name!r} is not a plain shard file name",
        )
        count, nbytes = entry.get("num_samples"), entry.get("bytes")
        _require(isinstance(count, int) and count >= 0, path, f"shards[{i}].num_samples is not a count")
        _require(isinstance(nbytes, int) and nbytes >= fmt.HEADER_BYTES, path, f"shards[{i}].bytes is not a size")
        shards.append(ShardInfo(name, count, nbytes))
    total = obj.get("num_samples")
    _require(isinstance(total, int) and total == sum(s.num_samples for s in shards), path, "num_samples does not match the shards")
    classes = obj.get("classes")
    _require(classes is None or (isinstance(classes, list) and all(isinstance(c, str) for c in classes)), path, "'classes' is not a list of names")
    skipped = obj.get("skipped", [])
    _require(isinstance(skipped, list), path, "'skipped' is not a list")
    options = obj.get("options", {})
    _require(isinstance(options, dict), path, "'options' is not an object")
    encoding = obj.get("encoding", "jpeg")
    _require(isinstance(encoding, str), path, "'encoding' is not a string")
    return Manifest(total, tuple(shards), tuple(classes) if classes is not None else None, encoding, tuple(skipped), options)


class _Shard:
    """One opened shard: header, checked index, and a lazily created read-only mapping."""

    def __init__(self, path: Path, expected: ShardInfo) -> None:
        self.path = path
        self.name = str(path)
        try:
            with open(path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                raw_header = handle.read(fmt.HEADER_BYTES)
                self.header = fmt.parse_header(raw_header, size, self.name)
                if self.header.num_samples != expected.num_samples or size != expected.bytes:
                    raise FormatError(
                        f"{self.name}: holds {self.header.num_samples} samples in {size} bytes, the manifest says "
                        f"{expected.num_samples} in {expected.bytes} (truncated or replaced shard)"
                    )
                handle.seek(self.header.index_offset)
                raw_index = handle.read(self.header.num_samples * fmt.RECORD_BYTES)
        except FileNotFoundError as exc:
            raise FormatError(f"{self.name}: shard listed in the manifest is missing") from exc
        except OSError as exc:
            raise InputError(f"{self.name}: cannot read shard: {exc.strerror or exc}") from exc
        if zlib.crc32(raw_index) != self.header.index_crc32:
            raise FormatError(f"{self.name}: index checksum mismatch (the shard is corrupt)")
        self.index = np.frombuffer(raw_index, dtype=fmt.RECORD_DTYPE)
        fmt.check_index(self.index, self.header, self.name)
        self._map: mmap.mmap | None = None
        self._lock = threading.Lock()

    def mapping(self) -> mmap.mmap:
        if self._map is None:
            with self._lock:
                if self._map is None:
                    with open(self.path, "rb") as handle:
                        size = os.fstat(handle.fileno()).st_size
                        if size != self.header.file_bytes:
                            raise FormatError(f"{self.name}: truncated shard ({size} bytes, expected {self.header.file_bytes})")
                        self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        return self._map

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_map"] = None
        state["_lock"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


class PackedDataset(torch.utils.data.Dataset):
    """A packed dataset as a map-style dataset: ``ds[i] -> (image, label)``.

    ``output`` chooses the image type: ``"pil"`` (RGB ``PIL.Image``, so torchvision transforms work
    unchanged), ``"numpy"`` (HxWx3 uint8), ``"tensor"`` (3xHxW uint8) or ``"bytes"`` (the stored
    bytes, undecoded). ``shards`` opens only those shard numbers (disjoint parts for several
    nodes). ``verify=True`` checks each sample's CRC-32 when it is read.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[int], Any] | None = None,
        output: str = "pil",
        verify: bool = False,
        shards: Iterable[int] | None = None,
        backend: str | None = None,
    ) -> None:
        if output not in OUTPUTS:
            raise InputError(f"output must be one of {OUTPUTS}, got {output!r}")
        self.root = Path(path)
        self.manifest = read_manifest(self.root)
        selected = list(range(len(self.manifest.shards))) if shards is None else sorted(set(shards))
        for number in selected:
            if not 0 <= number < len(self.manifest.shards):
                raise InputError(f"{self.root}: no shard {number} (the dataset has {len(self.manifest.shards)})")
        self._shards = [_Shard(self.root / self.manifest.shards[n].file, self.manifest.shards[n]) for n in selected]
        counts = np.array([s.header.num_samples for s in self._shards], dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(counts)])
        index = np.concatenate([s.index for s in self._shards]) if self._shards else np.zeros(0, fmt.RECORD_DTYPE)
        self.labels = index["label"].astype(np.int64)
        self.widths = index["width"].astype(np.int64)
        self.heights = index["height"].astype(np.int64)
        self.encodings = index["encoding"].copy()
        self.channels = index["channels"].copy()
        self.classes = list(self.manifest.classes) if self.manifest.classes is not None else None
        self.transform = transform
        self.target_transform = target_transform
        self.output = output
        self.verify = verify
        self._backend_name = backend
        self._backend = get_backend(backend)

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_backend"] = None  # bindings hold C handles; rebuilt on unpickle
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._backend = get_backend(self._backend_name)

    @property
    def num_shards(self) -> int:
        """Number of shards opened."""
        return len(self._shards)

    def locate(self, index: int) -> tuple[int, int]:
        """(shard position, record number in that shard) of dataset index ``index``."""
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"index {index} out of range for a dataset of {n} samples")
        shard = int(np.searchsorted(self._starts, index, side="right")) - 1
        return shard, index - int(self._starts[shard])

    def sample_bytes(self, index: int, verify: bool | None = None) -> memoryview:
        """The stored bytes of sample ``index`` (a zero-copy view of the mapping)."""
        shard_pos, local = self.locate(index)
        shard = self._shards[shard_pos]
        record = shard.index[local]
        start = int(record["offset"])
        view = memoryview(shard.mapping())[start : start + int(record["size"])]
        if (self.verify if verify is None else verify) and zlib.crc32(view) != int(record["crc32"]):
            raise FormatError(f"{shard.name}: sample {local} (dataset index {index}) checksum mismatch; the shard is corrupt")
        return view

    def shard_name(self, index: int) -> str:
        """Path of the shard holding sample ``index`` (for error messages)."""
        return self._shards[self.locate(index)[0]].name

    def decode(self, index: int) -> np.ndarray:
        """Sample ``index`` decoded to HxWx3 uint8 RGB."""
        data = self.sample_bytes(index)
        name = f"{self.shard_name(index)} sample {index}"
        index = index + len(self) if index < 0 else index
        if self.encodings[index] == fmt.ENC_RAW:
            pixels = np.frombuffer(data, dtype=np.uint8).reshape(int(self.heights[index]), int(self.widths[index]), int(self.channels[index]))
            return np.repeat(pixels, 3, axis=2) if pixels.shape[2] == 1 else pixels.copy()
        return decode_full(data, self._backend, name)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        self.locate(index)  # bounds check, IndexError like a list
        label: Any = int(self.labels[index])
        if self.output == "bytes":
            image: Any = bytes(self.sample_bytes(index))
        else:
            pixels = self.decode(index)
            if self.output == "pil":
                image = Image.fromarray(pixels)
            elif self.output == "tensor":
                image = torch.from_numpy(np.ascontiguousarray(pixels)).permute(2, 0, 1)
            else:
                image = pixels
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            label = self.target_transform(label)
        return image, label


@dataclass(frozen=True)
class VerifyReport:
    """Result of :func:`verify`: what was checked."""

    num_samples: int
    num_shards: int
    bytes_checked: int


def verify(path: str | os.PathLike[str], progress: Callable[[int], None] | None = None) -> VerifyReport:
    """Check every shard's header, index and every sample's CRC-32; raise FormatError on the first bad one.

    ``progress(n)`` is called with the number of samples checked since the last call.
    """
    dataset = PackedDataset(path, output="bytes")
    checked = 0
    for shard in dataset._shards:
        mapping = shard.mapping()
        for local, record in enumerate(shard.index):
            start = int(record["offset"])
            view = memoryview(mapping)[start : start + int(record["size"])]
            if zlib.crc32(view) != int(record["crc32"]):
                raise FormatError(f"{shard.name}: sample {local} checksum mismatch; the shard is corrupt (re-run `stave pack`)")
            checked += len(view)
            if progress is not None and local % 256 == 255:
                progress(256)
        if progress is not None:
            progress(len(shard.index) % 256)
    return VerifyReport(len(dataset), dataset.num_shards, checked)
