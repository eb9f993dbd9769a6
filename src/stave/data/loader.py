"""ImageLoader: packed dataset -> crop-aware decode in worker threads -> uint8 batches -> device.

The pipeline, with the contract of each stage:

1. **Order** (:mod:`stave.data.order`): per epoch a fresh permutation from (seed, epoch); each rank a
   disjoint, equal slice; batches of ``batch_size`` indices.
2. **Boxes** (:mod:`stave.data.crop`): per batch, crop boxes and flips drawn from the index's widths
   and heights with a generator seeded by (seed, epoch, rank, batch), before any decode.
3. **Decode** (worker threads, :mod:`stave.data.decode`): each sample is decoded as far as its box
   needs, resized to ``size`` and mirrored; ``transform`` (the user's, on that uint8 HxWx3 array) runs
   here. The result goes straight into a preallocated batch: on a GPU a pinned uint8 staging buffer,
   on a CPU the output batch itself, cast and normalized by the thread (the host is the device).
4. **Device** (:class:`~stave.data.device_loader.DeviceLoader`): on a GPU the uint8 batch is copied
   asynchronously and cast and normalized there; ``batch_transform`` runs on the device batch.

Why threads: libjpeg-turbo and Pillow's resize release the GIL, so threads decode in parallel
without per-worker copies of the dataset, pickling or shared-memory hand-offs (docs/data.md has the
measurement against process workers).
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from stave import device as dev
from stave.data import format as fmt
from stave.data.crop import DEFAULT_RATIO, DEFAULT_SCALE, center_crop_boxes, random_resized_crop_boxes
from stave.data.dataset import PackedDataset
from stave.data.decode import CropBox, DecodeInfo, decode_jpeg_region, get_backend, raw_region
from stave.data.device_loader import DeviceLoader
from stave.data.native import native_module
from stave.data.resize import crop_resize_into, serial_torch_in_this_thread
from stave.data.scratch import thread_scratch
from stave.dist.env import detect
from stave.data.order import OrderSpec, batch_rng, rank_indices
from stave.errors import FormatError, UsageError

log = logging.getLogger(__name__)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# Batches decoded ahead of the one being consumed: two keep the workers busy across a batch
# boundary while the main thread normalizes; more only costs memory.
DEFAULT_PREFETCH_BATCHES = 2
# workers="auto" keeps the smallest thread count within this share of the fastest one measured.
AUTO_TOLERANCE = 0.05
# Samples decoded per candidate thread count in the workers="auto" measurement (~0.1 s each).
AUTO_SAMPLES = 48
# Timed passes per thread count (after a warm-up), best one kept: enough to see past a load burst.
AUTO_ROUNDS = 2
STATE_VERSION = 1


@dataclass
class DecodeStats:
    """Counters over the samples decoded so far (for the report and the benchmark)."""

    samples: int = 0
    reduced: int = 0
    rows_decoded: int = 0
    rows_total: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, samples: int, reduced: int, rows_decoded: int, rows_total: int) -> None:
        """Add one task's counts (thread-safe)."""
        with self._lock:
            self.samples += samples
            self.reduced += reduced
            self.rows_decoded += rows_decoded
            self.rows_total += rows_total

    @property
    def reduced_share(self) -> float:
        """Share of JPEG decodes done at a reduced DCT scale (1/2, 1/4, 1/8)."""
        return self.reduced / self.samples if self.samples else 0.0

    @property
    def rows_share(self) -> float:
        """Decoded rows / total rows over JPEG decodes (below 1 where the row cut applied)."""
        return self.rows_decoded / self.rows_total if self.rows_total else 1.0


@dataclass
class _Job:
    epoch: int
    batch: int
    slot: int
    indices: np.ndarray
    futures: list[concurrent.futures.Future[None]]
    out: torch.Tensor


class ImageLoader:
    """Batches of images from a packed dataset, decoded crop-aware in threads, normalized on ``device``.

    Yields ``(images, labels)``: images ``N x 3 x size x size`` of ``dtype`` (float32 by default)
    normalized with ``mean``/``std`` on ``device`` (``mean=None`` yields uint8), labels int64.
    ``train=True``: RandomResizedCrop(size) + horizontal flip, shuffled; ``train=False``:
    Resize(size/0.875) + CenterCrop(size), in order. The epoch advances by itself after each full
    pass (or set it with :meth:`set_epoch`); :meth:`state_dict` resumes mid-epoch.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | PackedDataset,
        batch_size: int,
        train: bool = True,
        size: int = 224,
        workers: int | str = "auto",
        device: str | torch.device | None = None,
        mean: Sequence[float] | None = IMAGENET_MEAN,
        std: Sequence[float] | None = IMAGENET_STD,
        channels_last: bool = False,
        drop_last: bool | None = None,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        transform: Callable[[np.ndarray], np.ndarray] | None = None,
        batch_transform: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
        *,
        dtype: torch.dtype | None = None,
        scale: tuple[float, float] = DEFAULT_SCALE,
        ratio: tuple[float, float] = DEFAULT_RATIO,
        flip: bool | None = None,
        resize: int | None = None,
        prefetch_batches: int = DEFAULT_PREFETCH_BATCHES,
        backend: str | None = None,
        verify: bool = False,
        reduced_decode: bool = True,
    ) -> None:
        self.dataset = path if isinstance(path, PackedDataset) else PackedDataset(path, output="bytes", verify=verify, backend=backend)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise UsageError(f"size must be a positive int, got {size!r}")
        if prefetch_batches < 1:
            raise UsageError(f"prefetch_batches must be at least 1, got {prefetch_batches}")
        if not (0 < scale[0] <= scale[1] <= 1.0) or not (0 < ratio[0] <= ratio[1]):
            raise UsageError(f"scale must satisfy 0 < lo <= hi <= 1 and ratio 0 < lo <= hi; got {scale}, {ratio}")
        rank, world_size = _resolve_rank(rank, world_size)
        self.train = train
        self.size = size
        self.spec = OrderSpec(
            num_samples=len(self.dataset),
            batch_size=batch_size,
            shuffle=train,
            drop_last=train if drop_last is None else drop_last,
            seed=seed,
            rank=rank,
            world_size=world_size,
        )
        self.device = dev.resolve_device(device)
        self.transform = transform
        self.batch_transform = batch_transform
        self.scale = scale
        self.ratio = ratio
        self.flip = train if flip is None else flip
        self.resize = resize
        self.prefetch_batches = prefetch_batches
        self.reduced_decode = reduced_decode
        self._backend = get_backend(backend)
        self._workers_arg = workers
        self._workers: int | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._slots: list[torch.Tensor] = []
        self._out_ring: list[torch.Tensor | None] = []
        # Slots rotate across epochs too: restarting at 0 each epoch would hit the slot of the batch
        # the caller's loop variable still holds, forcing a new buffer at every epoch boundary.
        self._slot_seq = 0
        self.buffers_allocated = 0
        self._slot_events: list[Any] = []
        self._pin = dev.is_cuda(self.device) and dev.pin_memory_available()
        # On a GPU, uint8 travels and the GPU normalizes. On a CPU the host is the device: each decode
        # thread normalizes its own samples while they are still in cache, straight into the batch.
        self._host_normalize = not dev.is_cuda(self.device)
        self._out_dtype = dtype or (torch.float32 if mean is not None else torch.uint8)
        self._channels_last = channels_last
        self._host_constants = _host_constants(mean, std, self._out_dtype) if self._host_normalize else None
        # The native fused copy (uint8 HWC -> normalized float32 CHW, one pass) when it is built.
        self._native_normalize = _native_normalize_args(self._host_constants, self._out_dtype)
        # On a CPU the batches are final when the threads are done: no copy to overlap, so no prefetcher
        # (its look-ahead would only hold one more 154 MB batch buffer).
        self._device_loader = (
            None if self._host_normalize else DeviceLoader((), self.device, mean, std, channels_last, dtype, on_copied=self._copied)
        )
        self._epoch = 0
        self._batches_done = 0
        self.stats = DecodeStats()
        if isinstance(workers, str) and workers != "auto":
            raise UsageError(f"workers must be an int >= 1 or 'auto', got {workers!r}")
        if isinstance(workers, int) and workers < 1:
            raise UsageError(f"workers must be at least 1 (threads), got {workers}")

    # -- public state ------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.spec.num_batches

    @property
    def epoch(self) -> int:
        """The epoch the next iteration reads."""
        return self._epoch

    @property
    def workers(self) -> int:
        """Decode threads (measured on first use when ``workers="auto"``)."""
        if self._workers is None:
            self._workers = self._workers_arg if isinstance(self._workers_arg, int) else self._measure_workers()
        return self._workers

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` from its first batch at the next iteration."""
        self._epoch = int(epoch)
        self._batches_done = 0

    def state_dict(self) -> dict[str, Any]:
        """Where the loader is: the epoch and the number of batches already yielded in it."""
        spec = self.spec
        return {
            "version": STATE_VERSION,
            "epoch": self._epoch,
            "batches_done": self._batches_done,
            "seed": spec.seed,
            "num_samples": spec.num_samples,
            "batch_size": spec.batch_size,
            "world_size": spec.world_size,
            "rank": spec.rank,
            "shuffle": spec.shuffle,
            "drop_last": spec.drop_last,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next iteration yields exactly the batches the saved run had not yet yielded."""
        for key in ("seed", "num_samples", "batch_size", "world_size", "shuffle", "drop_last"):
            if state.get(key) != self.state_dict()[key]:
                raise UsageError(f"loader state has {key}={state.get(key)!r}, this loader has {self.state_dict()[key]!r}")
        done = int(state["batches_done"])
        if not 0 <= done <= self.spec.num_batches:
            raise UsageError(f"loader state has batches_done={done}, outside 0..{self.spec.num_batches}")
        self._epoch = int(state["epoch"])
        self._batches_done = done

    def close(self) -> None:
        """Stop the worker threads."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __del__(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    # -- iteration -----------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        host = self._host_batches(self._epoch, self._batches_done)
        source: Iterator[Any] = host
        if self._device_loader is not None:
            self._device_loader.loader = host
            source = iter(self._device_loader)
        try:
            for images, labels in source:
                if self.batch_transform is not None:
                    images, labels = self.batch_transform(images, labels)
                self._batches_done += 1
                yield images, labels
        finally:
            # Stop the decode tasks of this pass now (not at garbage collection), before any close().
            host.close()
        if self._batches_done >= self.spec.num_batches:
            self._epoch += 1
            self._batches_done = 0

    def _ensure_started(self) -> None:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                self.workers, thread_name_prefix="stave-decode", initializer=serial_torch_in_this_thread
            )
        if self._host_normalize and not self._out_ring:
            # In flight + the one being handed out + the one the caller's loop variable still holds.
            self._out_ring = [None] * (self.prefetch_batches + 2)
        if not self._slots and not self._host_normalize:
            count = self.prefetch_batches + 2  # in flight + the one being copied + slack for the user's
            shape = (self.spec.batch_size, self.size, self.size, 3)
            self._slots = [torch.empty(shape, dtype=torch.uint8, pin_memory=self._pin) for _ in range(count)]
            self._slot_events = [None] * count

    def _copied(self, host_batch: Any, event: Any) -> None:
        slot = getattr(host_batch, "slot", None)
        if slot is not None:
            self._slot_events[slot] = event

    def _boxes(self, indices: np.ndarray, epoch: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
        widths = self.dataset.widths[indices]
        heights = self.dataset.heights[indices]
        if not self.train:
            return center_crop_boxes(widths, heights, self.size, self.resize), np.zeros(len(indices), dtype=bool)
        rng = batch_rng(self.spec.seed, epoch, self.spec.rank, batch)
        boxes = random_resized_crop_boxes(widths, heights, rng, self.scale, self.ratio).astype(np.float64)
        flips = rng.random(len(indices)) < 0.5 if self.flip else np.zeros(len(indices), dtype=bool)
        return boxes, flips

    def _submit(self, epoch: int, batch: int, slot: int, indices: np.ndarray) -> _Job:
        assert self._pool is not None
        if not self._host_normalize:
            # The slot's previous batch may still be copying to the GPU from this pinned buffer.
            dev.wait_event(self._slot_events[slot])
            self._slot_events[slot] = None
        boxes, flips = self._boxes(indices, epoch, batch)
        if self._host_normalize:
            out = self._output_buffer(slot)[: len(indices)]
        else:
            out = self._slots[slot]
        chunks = np.array_split(np.arange(len(indices)), min(len(indices), self.workers * 2))
        futures = [
            self._pool.submit(self._decode_rows, out, indices, boxes, flips, rows) for rows in chunks if len(rows)
        ]
        return _Job(epoch, batch, slot, indices, futures, out)

    def _output_buffer(self, slot: int) -> torch.Tensor:
        """The CPU output batch for ``slot``: reused when the caller no longer holds it, else a new one.

        Reuse matters: a fresh 150 MB batch costs ~40k first-touch page faults (measured at ~0.5 ms per
        image on the development VM). A batch (or a view of it) the caller still holds is never
        overwritten: its reference count shows it, and the slot gets a new buffer instead.
        """
        buffer = self._out_ring[slot]
        # References: the ring's entry, ``buffer`` and getrefcount's argument; any more are the caller's.
        if buffer is None or sys.getrefcount(buffer) > 3:
            memory_format = torch.channels_last if self._channels_last else torch.contiguous_format
            shape = (self.spec.batch_size, 3, self.size, self.size)
            buffer = torch.empty(shape, dtype=self._out_dtype, memory_format=memory_format)
            self._out_ring[slot] = buffer
            self.buffers_allocated += 1
        return buffer

    def _decode_rows(self, out: torch.Tensor, indices: np.ndarray, boxes: np.ndarray, flips: np.ndarray, rows: np.ndarray) -> None:
        reduced = rows_decoded = rows_total = 0
        for row in rows:
            info = self.decode_into(out[row], int(indices[row]), boxes[row], bool(flips[row]))
            if info is not None:
                reduced += info.scale_denom > 1
                rows_decoded += info.rows_decoded
                rows_total += info.rows_total
        self.stats.add(len(rows), reduced, rows_decoded, rows_total)

    def decode_into(self, out: torch.Tensor, index: int, box_xywh: np.ndarray, flip: bool) -> DecodeInfo | None:
        """Decode sample ``index`` under ``box_xywh`` into ``out``.

        ``out`` is a 3 x size x size row of the output batch (CPU device: normalized there) or a
        size x size x 3 uint8 row of a pinned staging buffer (GPU device). Every intermediate (decoded
        pixels, crop, resized image, planar copy) lives in this thread's scratch buffers: nothing of
        image size is allocated per sample (docs/data.md has the measurements).
        """
        data = self.dataset.sample_bytes(index)
        box = CropBox(*(float(v) for v in box_xywh))
        scratch = thread_scratch()
        info = None
        if self.dataset.encodings[index] == fmt.ENC_RAW:
            pixels = np.frombuffer(data, dtype=np.uint8).reshape(
                int(self.dataset.heights[index]), int(self.dataset.widths[index]), int(self.dataset.channels[index])
            )
            region = raw_region(pixels, box)
        else:
            name = f"{self.dataset.shard_name(index)} sample {index}"
            region = decode_jpeg_region(data, box, self.size, self.size, self._backend, name, self.reduced_decode, scratch=scratch)
            info = region.info
        resized = scratch.array("resized", (self.size, self.size, 3))
        crop_resize_into(region.pixels, region.box, resized, scratch)
        pixels_hwc = resized[:, ::-1] if flip else resized  # a view: the copy below does the mirroring
        if self.transform is not None:
            pixels_hwc = self._user_transform(pixels_hwc)
        if self._host_constants is None:
            np.copyto(out.numpy(), pixels_hwc)  # HWC uint8 row of the (pinned) staging buffer: GPU path
        elif self._native_normalize is not None and out.is_contiguous():
            native, scale, shift = self._native_normalize
            if self.transform is None:  # mirrored by the copy itself
                native.planar_normalize(resized, out.numpy(), self.size, self.size, scale, shift, flip)
            else:  # the transform saw (and returned) the mirrored image
                native.planar_normalize(np.ascontiguousarray(pixels_hwc), out.numpy(), self.size, self.size, scale, shift, False)
        else:
            # HWC -> CHW as a uint8 numpy copy (flip included), then a contiguous cast: cheaper than one
            # strided cast-and-transpose copy_ (docs/data.md).
            planar = scratch.array("planar", (3, self.size, self.size))
            np.copyto(planar, pixels_hwc.transpose(2, 0, 1))
            out.copy_(torch.from_numpy(planar))
            if self._host_constants[0] is not None:
                out.mul_(self._host_constants[0]).sub_(self._host_constants[1])
        return info

    def _user_transform(self, image: Any) -> np.ndarray:
        assert self.transform is not None
        pixels = image.numpy() if isinstance(image, torch.Tensor) else image
        result = self.transform(np.ascontiguousarray(pixels))
        result = result.numpy() if isinstance(result, torch.Tensor) else np.asarray(result)
        if result.shape != (self.size, self.size, 3) or result.dtype != np.uint8:
            raise UsageError(f"transform must return a {self.size}x{self.size}x3 uint8 array, got {result.shape} {result.dtype}")
        return result

    def _host_batches(self, epoch: int, start: int) -> Iterator["_HostBatch"]:
        self._ensure_started()
        indices_all = rank_indices(self.spec, epoch)
        total = self.spec.num_batches
        ring = len(self._out_ring) if self._host_normalize else len(self._slots)
        jobs: list[_Job] = []
        next_batch = start

        def submit_next() -> None:
            nonlocal next_batch
            lo = next_batch * self.spec.batch_size
            idx = indices_all[lo : lo + self.spec.batch_size]
            jobs.append(self._submit(epoch, next_batch, self._slot_seq % ring, idx))
            self._slot_seq += 1
            next_batch += 1

        try:
            for _ in range(min(self.prefetch_batches, total - start)):
                submit_next()
            while jobs:
                job = jobs.pop(0)
                for future in job.futures:
                    future.result()
                if next_batch < total:
                    submit_next()
                images = job.out if self._host_normalize else job.out[: len(job.indices)].permute(0, 3, 1, 2)
                labels = torch.from_numpy(self.dataset.labels[job.indices])
                if self._pin:
                    labels = labels.pin_memory()  # so its copy is asynchronous too
                yield _HostBatch(images, labels, job.slot)
        finally:
            # Stopped early (break, error): in-flight tasks still write into the slots.
            # A cancelled future never runs (and is never "done" for wait()); wait only for running ones.
            running = [future for job in jobs for future in job.futures if not future.cancel()]
            concurrent.futures.wait(running)

    def _measure_workers(self) -> int:
        """Decode a few samples with 1..cores threads and keep the smallest count near the best rate.

        Each count gets a warm-up pass (thread start, scratch buffers) and :data:`AUTO_ROUNDS` timed
        passes in alternating order; its best pass counts. Other processes can only slow a pass down,
        so the best one is the least disturbed (a single pass under load once picked 1 thread of 2).
        """
        cores = dev.usable_cores()
        if cores <= 1 or len(self.dataset) == 0:
            return 1
        probe = np.arange(min(AUTO_SAMPLES, len(self.dataset)))
        boxes, flips = self._boxes(probe, 0, 0)
        out = (
            torch.empty((len(probe), 3, self.size, self.size), dtype=self._out_dtype)
            if self._host_normalize
            else torch.empty((len(probe), self.size, self.size, 3), dtype=torch.uint8)
        )
        counts = list(range(1, cores + 1))
        pools = {c: concurrent.futures.ThreadPoolExecutor(c, initializer=serial_torch_in_this_thread) for c in counts}

        def timed_pass(count: int) -> float:
            chunks = [c for c in np.array_split(np.arange(len(probe)), count * 2) if len(c)]
            start = time.perf_counter()
            futures = [pools[count].submit(self._probe_rows, out, probe, boxes, flips, c) for c in chunks]
            for future in futures:
                future.result()
            return len(probe) / (time.perf_counter() - start)

        rates: dict[int, float] = {}
        try:
            for count in counts:
                timed_pass(count)  # warm-up
            for round_number in range(AUTO_ROUNDS):
                for count in counts if round_number % 2 == 0 else counts[::-1]:
                    rates[count] = max(rates.get(count, 0.0), timed_pass(count))
        finally:
            for pool in pools.values():
                pool.shutdown(wait=True)
        best = max(rates.values())
        chosen = min(c for c, r in rates.items() if r >= best * (1 - AUTO_TOLERANCE))
        log.info("ImageLoader workers='auto': %s samples/s by thread count -> %d", {c: round(r) for c, r in rates.items()}, chosen)
        return chosen

    def _probe_rows(self, out: torch.Tensor, indices: np.ndarray, boxes: np.ndarray, flips: np.ndarray, rows: np.ndarray) -> None:
        for row in rows:
            try:
                self.decode_into(out[row], int(indices[row]), boxes[row], bool(flips[row]))
            except FormatError:
                # A corrupt sample is reported when training reads it, not by the probe.
                continue


class _HostBatch(tuple):
    """``(images, labels)`` with the buffer slot it lives in (so the copy's completion can be tracked)."""

    slot: int

    def __new__(cls, images: torch.Tensor, labels: torch.Tensor, slot: int) -> "_HostBatch":
        obj = super().__new__(cls, (images, labels))
        obj.slot = slot
        return obj


def _native_normalize_args(
    constants: tuple[torch.Tensor | None, torch.Tensor | None] | None, dtype: torch.dtype
) -> tuple[Any, tuple[float, ...], tuple[float, ...]] | None:
    """(native module, scale, shift) for the fused float32 copy on the host, or None to use torch ops."""
    native = native_module()
    if native is None or constants is None or dtype != torch.float32:
        return None
    scale, shift = constants
    if scale is None or shift is None:
        return native, (1.0, 1.0, 1.0), (0.0, 0.0, 0.0)  # a plain cast to 0..255 floats
    # float32 values, exactly representable as Python floats: the table rounds as torch's mul_/sub_ do.
    return native, tuple(float(v) for v in scale.flatten()), tuple(float(v) for v in shift.flatten())


def _host_constants(
    mean: Sequence[float] | None, std: Sequence[float] | None, dtype: torch.dtype
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Per-channel ``1 / (255 std)`` and ``mean / std`` shaped for one CHW sample (None, None: no normalization)."""
    if mean is None or std is None:
        return None, None  # a plain cast (0..255 values), as the GPU path does
    if any(v == 0 for v in std):
        raise UsageError(f"std must not contain 0, got {list(std)}")
    mean64 = torch.tensor(mean, dtype=torch.float64).view(-1, 1, 1)
    std64 = torch.tensor(std, dtype=torch.float64).view(-1, 1, 1)
    if mean64.shape[0] != 3 or std64.shape[0] != 3:
        raise UsageError(f"mean and std need 3 values (RGB), got {len(mean)} and {len(std)}")
    return (1.0 / (255.0 * std64)).to(dtype), (mean64 / std64).to(dtype)


def _resolve_rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """Explicit values win; else torch.distributed when initialized; else the launcher's variables
    (torchrun's RANK/WORLD_SIZE or srun's, read as the doctor reads them: :func:`stave.dist.env.detect`); else 0/1."""
    if rank is not None and world_size is not None:
        return int(rank), int(world_size)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return (
            int(rank) if rank is not None else torch.distributed.get_rank(),
            int(world_size) if world_size is not None else torch.distributed.get_world_size(),
        )
    launched = detect()
    return (
        int(rank) if rank is not None else launched.rank if launched else 0,
        int(world_size) if world_size is not None else launched.world_size if launched else 1,
    )
