"""The input pipelines ``stave bench data`` compares, and how one measurement window is taken.

Every pipeline yields the same thing: batches of ``batch_size`` RandomResizedCrop(size) + flip
images (or Resize + CenterCrop for the eval path) as normalized float32 NCHW tensors in the main
process, ready for a CPU model. A window builds the pipeline fresh, runs warm-up batches untimed,
then times one epoch's worth of batches (so a window crosses one epoch boundary, where
non-persistent workers restart), and tears the pipeline down so nothing keeps decoding in the
background while the next pipeline is measured.
"""

from __future__ import annotations

import io
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import psutil
import torch
from PIL import Image

from stave.data.crop import random_resized_crop_boxes
from stave.data.decode import CropBox, decode_encoded_crop, get_backend

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
# The ceiling's reused output buffer: room for a 4096 x 4096 RGB decode (far above the benchmark's images).
_CEILING_BUFFER_BYTES = 4096 * 4096 * 3
# Peak-RSS sampling period: short enough to catch a batch being collated (~100 ms).
_RSS_PERIOD_S = 0.05


@dataclass(frozen=True)
class LoaderConfig:
    """A torch DataLoader configuration of the worker search."""

    workers: int
    persistent: bool = False
    prefetch: int | None = None

    @property
    def label(self) -> str:
        if self.workers == 0:
            return "workers=0"
        return f"workers={self.workers} persistent={self.persistent} prefetch={self.prefetch}"


def search_space(max_workers: int) -> list[LoaderConfig]:
    """workers 0..max_workers; for >0 workers both persistent_workers values and prefetch_factor 2/4."""
    configs = [LoaderConfig(0)]
    for workers in range(1, max_workers + 1):
        for persistent in (False, True):
            for prefetch in (2, 4):
                configs.append(LoaderConfig(workers, persistent, prefetch))
    return configs


def torchvision_transform(size: int, train: bool, uint8: bool = False) -> Callable[[Image.Image], torch.Tensor]:
    """The seed baseline's per-sample transform (ToTensor + Normalize, or PILToTensor for uint8)."""
    from torchvision import transforms as T

    steps: list[Any] = (
        [T.RandomResizedCrop(size), T.RandomHorizontalFlip()]
        if train
        else [T.Resize(int(round(size / 0.875))), T.CenterCrop(size)]
    )
    steps += [T.PILToTensor()] if uint8 else [T.ToTensor(), T.Normalize(MEAN, STD)]
    return T.Compose(steps)


class _EncodedStore(torch.utils.data.Dataset):
    """JPEG bytes in LMDB or HDF5 (opened lazily once per worker process), decoded by PIL like ImageFolder."""

    def __init__(self, kind: str, path: Path, labels: np.ndarray, transform: Callable[[Image.Image], Any]) -> None:
        self.kind, self.path, self.labels, self.transform = kind, path, labels, transform
        self._handle: Any = None
        self._pid = -1

    def _open(self) -> Any:
        if self._handle is None or self._pid != os.getpid():
            if self.kind == "lmdb":
                import lmdb

                self._handle = lmdb.open(str(self.path), readonly=True, lock=False, readahead=False, meminit=False)
            else:
                import h5py

                self._handle = h5py.File(self.path, "r")["jpeg"]
            self._pid = os.getpid()
        return self._handle

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        handle = self._open()
        if self.kind == "lmdb":
            with handle.begin(buffers=False) as txn:
                data = txn.get(b"%08d" % index)
        else:
            data = handle[index].tobytes()
        image = Image.open(io.BytesIO(data)).convert("RGB")
        return self.transform(image), int(self.labels[index])

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_handle": None, "_pid": -1}


def write_stores(files: list[Path], labels: np.ndarray, workdir: Path) -> dict[str, Path]:
    """The same JPEG bytes in an LMDB environment and an HDF5 file (the seeds' formats)."""
    stores: dict[str, Path] = {}
    try:
        import lmdb

        path = workdir / "jpeg.lmdb"
        if not path.exists():
            total = sum(f.stat().st_size for f in files)
            env = lmdb.open(str(path), map_size=int(total * 2 + (64 << 20)), subdir=True)
            with env.begin(write=True) as txn:
                for i, f in enumerate(files):
                    txn.put(b"%08d" % i, f.read_bytes())
            env.close()
        stores["lmdb"] = path
    except ImportError:
        pass
    try:
        import h5py

        path = workdir / "jpeg.h5"
        if not path.exists():
            with h5py.File(path, "w") as handle:
                data = handle.create_dataset("jpeg", (len(files),), dtype=h5py.vlen_dtype(np.uint8))
                for i, f in enumerate(files):
                    data[i] = np.frombuffer(f.read_bytes(), dtype=np.uint8)
        stores["hdf5"] = path
    except ImportError:
        pass
    return stores


class _CropDecodeDataset(torch.utils.data.Dataset):
    """stave's crop-aware decode, per sample, inside torch DataLoader worker processes (threads vs processes)."""

    def __init__(self, packed: Path, size: int, seed: int) -> None:
        from stave.data.dataset import PackedDataset

        self.ds = PackedDataset(packed, output="bytes")
        self.size, self.seed = size, seed
        self._backend: Any = None

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self._backend is None:
            self._backend = get_backend()
        rng = np.random.default_rng([self.seed, index, int(time.perf_counter_ns() & 0xFFFF)])
        box = random_resized_crop_boxes(self.ds.widths[index : index + 1], self.ds.heights[index : index + 1], rng)[0]
        image, _ = decode_encoded_crop(
            self.ds.sample_bytes(index), CropBox(*map(float, box)), self.size, self.size, self._backend, flip=bool(rng.random() < 0.5)
        )
        return image.permute(2, 0, 1), int(self.ds.labels[index])

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_backend": None}


def _normalize_uint8(batches: Iterable[Any]) -> Iterator[Any]:
    """uint8 batches -> normalized float32 in the main process (part of the timed loop)."""
    mean = torch.tensor(MEAN).view(1, 3, 1, 1) * 255
    inv_std = 1.0 / (torch.tensor(STD).view(1, 3, 1, 1) * 255)
    for images, labels in batches:
        yield (images.float() - mean) * inv_std, labels


class Pipeline:
    """A restartable source of batches: ``open()`` returns a fresh iterable, ``close()`` frees it."""

    def __init__(self, name: str, config: str, opener: Callable[[], Any], closer: Callable[[Any], None] | None = None) -> None:
        self.name, self.config, self._opener, self._closer = name, config, opener, closer
        self.extra: dict[str, Any] = {}

    def open(self) -> Any:
        return self._opener()

    def close(self, handle: Any) -> None:
        if self._closer is not None:
            self._closer(handle)


def dataloader_pipeline(name: str, dataset: Any, cfg: LoaderConfig, batch_size: int, uint8: bool = False) -> Pipeline:
    """A torch DataLoader over ``dataset`` with ``cfg`` (shuffle, drop_last)."""

    def opener() -> Any:
        kwargs: dict[str, Any] = {}
        if cfg.workers > 0:
            kwargs = {"persistent_workers": cfg.persistent, "prefetch_factor": cfg.prefetch}
        loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True, num_workers=cfg.workers, **kwargs)
        return _EpochLoop(loader, uint8)

    return Pipeline(name, cfg.label, opener, lambda handle: handle.close())


class _EpochLoop:
    """Iterates a loader forever, epoch after epoch (a new ``iter()`` each epoch, as training does)."""

    def __init__(self, loader: Any, uint8: bool = False) -> None:
        self.loader, self.uint8 = loader, uint8
        self._it: Iterator[Any] | None = None

    def __iter__(self) -> Iterator[Any]:
        while True:
            self._it = iter(self.loader)
            yield from (_normalize_uint8(self._it) if self.uint8 else self._it)

    def close(self) -> None:
        # Ends worker processes now rather than at garbage collection, so an idle pipeline's
        # workers cannot prefetch while the next one is measured (torch has no public close()).
        for it in (self._it, getattr(self.loader, "_iterator", None)):
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
        self._it = None
        close = getattr(self.loader, "close", None)
        if close is not None:
            close()


@dataclass
class Window:
    """One timed window of one pipeline."""

    images: int
    wall_s: float
    cpu_s: float
    peak_rss_bytes: int

    @property
    def images_per_s(self) -> float:
        return self.images / self.wall_s if self.wall_s > 0 else 0.0


def _tree_cpu() -> tuple[float, dict[int, float]]:
    me = psutil.Process()
    own = me.cpu_times()
    reaped = os.times()
    live: dict[int, float] = {}
    for child in me.children(recursive=True):
        try:
            t = child.cpu_times()
            live[child.pid] = t.user + t.system
        except psutil.Error:
            continue
    return own.user + own.system + reaped.children_user + reaped.children_system, live


def _tree_rss() -> int:
    me = psutil.Process()
    total = me.memory_info().rss
    for child in me.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            continue
    return total


def measure_window(pipeline: Pipeline, warmup_batches: int, timed_batches: int) -> Window:
    """Build ``pipeline``, run warm-up batches, time ``timed_batches``, tear it down.

    CPU seconds cover this process and its worker processes (live ones through psutil, exited ones
    through ``os.times`` once reaped); peak RSS is the sum over the process tree, sampled.
    """
    handle = pipeline.open()
    iterator = iter(handle)
    try:
        for _ in range(warmup_batches):
            next(iterator)
        peak = [0]
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(_RSS_PERIOD_S):
                peak[0] = max(peak[0], _tree_rss())

        sampler = threading.Thread(target=sample, daemon=True)
        own0, live0 = _tree_cpu()
        sampler.start()
        start = time.perf_counter()
        images = 0
        for _ in range(timed_batches):
            batch, _labels = next(iterator)
            images += int(batch.shape[0])
        wall = time.perf_counter() - start
        own1, live1 = _tree_cpu()
        stop.set()
        sampler.join()
        peak[0] = max(peak[0], _tree_rss())
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
        pipeline.close(handle)
    cpu = (own1 - own0) + sum(live1.values()) - sum(live0.values())
    return Window(images, wall, cpu, peak[0])


def decode_ceiling_pipeline(files: list[Path], backend_name: str, batch_size: int, reuse_output: bool = False) -> Pipeline:
    """One thread reading each file (page cache) and fully decoding it with one binding.

    ``backend_name`` is a name from :func:`stave.data.decode.available_backends` or ``"native"``
    (stave's own libjpeg-turbo call, always into a reused buffer).

    ``reuse_output`` decodes into one preallocated buffer instead of a fresh array per call (for a
    binding that can): the same full decode without the allocation's first-touch page faults, which
    glibc makes or spares depending on its allocation history. The benchmark measures both and takes
    the faster as the ceiling, so stave's reuse of buffers cannot beat a handicapped ceiling.
    """

    def opener() -> Any:
        if backend_name == "pillow":

            def decode(data: bytes) -> Any:
                return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))

        elif backend_name == "native":
            from stave.data.native import native_module

            native = native_module()
            assert native is not None
            whole = np.empty(_CEILING_BUFFER_BYTES, dtype=np.uint8)

            def decode(data: bytes) -> Any:
                # A region larger than any image is clamped to the whole frame: a full decode.
                return native.decode_region(data, 1, 0, 0, 1 << 16, 1 << 16, whole)

        else:
            from stave.data.decode import get_backend as pick

            backend = pick(backend_name)
            assert backend is not None
            buffer = np.empty(_CEILING_BUFFER_BYTES, dtype=np.uint8) if reuse_output else None

            def decode(data: bytes) -> Any:
                return backend.decode_rgb(data, 0, 0, 1, True, out=buffer)

        def batches() -> Iterator[Any]:
            position = 0
            while True:
                for _ in range(batch_size):
                    decode(files[position % len(files)].read_bytes())
                    position += 1
                yield torch.empty(batch_size, 0), None

        return batches()

    how = "1 thread, full decode into a reused buffer" if reuse_output else "1 thread, full decode"
    return Pipeline(f"decode ceiling ({backend_name}{', reused buffer' if reuse_output else ''})", how, opener)
