"""Input pipelines for one :class:`~stave.bench.settings.RunConfig`: endless, device-ready, pausable.

Two configurations are timed in alternating windows in one process. A paused pipeline must not
keep working for its next window while the other one is timed, or it would arrive with free
batches: DataLoader workers therefore read through a gate (a multiprocessing event) that is closed
while the pipeline is paused. A worker finishes at most the sample it is decoding. With
``num_workers=0`` nothing runs between windows and no gate is needed. Custom loaders cannot be
gated; they decode at most their own prefetch depth ahead (docs/bench.md).
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
from typing import Any, Iterable, Iterator

import torch
from torch.utils.data import DataLoader, Dataset, Sampler
from torch.utils.data import default_collate

from stave import device as dev
from stave.bench.settings import TORCH_LOADER, RunConfig
from stave.bench.spec import CustomLoader, JobSpec, LoaderRequest
from stave.errors import UsageError

log = logging.getLogger(__name__)

Batch = tuple[Any, torch.Tensor]


class InfiniteSampler(Sampler[int]):
    """A fresh permutation of ``range(n)`` per pass, forever: no epoch boundary inside a window."""

    def __init__(self, n: int, seed: int) -> None:
        self.n = n
        self.seed = seed

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator()
        generator.manual_seed(self.seed)
        while True:
            yield from torch.randperm(self.n, generator=generator).tolist()


class GatedDataset(Dataset):
    """``dataset`` whose ``__getitem__`` waits while ``gate`` (a multiprocessing Event) is clear."""

    def __init__(self, dataset: Dataset, gate: Any) -> None:
        self.dataset = dataset
        self.gate = gate

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        self.gate.wait()
        return self.dataset[index]


def image_inputs(spec: JobSpec, model: torch.nn.Module) -> bool:
    """Whether the job feeds image batches to 2-D convolutions (where channels_last applies)."""
    if spec.image_inputs is not None:
        return spec.image_inputs
    return any(isinstance(m, torch.nn.Conv2d) for m in model.modules())


def find_loader(spec: JobSpec, name: str) -> CustomLoader:
    """The job's custom loader called ``name``."""
    for loader in spec.loaders:
        if loader.name == name:
            return loader
    raise UsageError(f"job {spec.name!r} has no loader named {name!r}")


def device_loader_class() -> Any:
    """``stave.data.DeviceLoader``, or None while stave.data is not installed/complete."""
    try:
        from stave.data.device_loader import DeviceLoader
    except ImportError as exc:
        log.info("stave.data.DeviceLoader unavailable: %s", exc)
        return None
    return DeviceLoader


def _plain_to_device(batches: Iterable[Any], device: torch.device) -> Iterator[Batch]:
    # The job's own way: a blocking copy from pageable memory (what the baseline measures).
    for inputs, targets in batches:
        yield _move(inputs, device), _move(targets, device)


def _move(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_move(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _move(v, device) for k, v in value.items()}
    return value


def to_device_batches(
    spec: JobSpec, config: RunConfig, host_batches: Iterable[Any], device: torch.device, channels_last: bool
) -> Iterator[Batch]:
    """Host batches -> device batches as ``config`` says (plain copy, or DeviceLoader for uint8/pinned)."""
    if not (config.uint8 or config.pin_memory):
        return _plain_to_device(host_batches, device)
    loader_cls = device_loader_class()
    if loader_cls is None:
        raise UsageError("uint8 transfer and pinned copies need stave.data.DeviceLoader, which is not available")
    mean, std = (spec.mean, spec.std) if config.uint8 else (None, None)
    return iter(loader_cls(host_batches, device, mean=mean, std=std, channels_last=channels_last))


class Pipeline:
    """An endless stream of device-ready batches for one configuration."""

    def __init__(self, spec: JobSpec, config: RunConfig, device: torch.device, seed: int, channels_last: bool) -> None:
        self.spec = spec
        self.config = config
        self.device = device
        self.seed = seed
        self.channels_last = channels_last
        self._gate: Any = None
        self._iterable: Iterable[Batch] | None = None
        self._iterator: Iterator[Batch] | None = None
        self._custom: Any = None

    def _start(self) -> Iterator[Batch]:
        config, spec = self.config, self.spec
        if config.num_workers > 0:
            # Workers are forked from this process. Uncollected cyclic garbage that holds CUDA objects
            # (a reverted candidate's captured CUDA graph, its pool's tensors) would otherwise be
            # freed by a worker's collector, and CUDA calls fail in a forked child ("CUDA error:
            # initialization error", seen on an H100 in the fed comparison after the CUDA-graphs
            # rung): collect it here, in the process that owns it.
            gc.collect()
        if config.loader != TORCH_LOADER:
            custom = find_loader(spec, config.loader)
            request = LoaderRequest(
                config.batch_size, config.num_workers, self.device, self.channels_last, True, self.seed
            )
            self._custom = custom.build(request)
            return _Restarting(self._custom)
        dataset: Dataset = spec.uint8_dataset if config.uint8 else spec.dataset  # type: ignore[assignment]
        if config.num_workers > 0:
            self._gate = multiprocessing.get_context().Event()
            self._gate.set()
            dataset = GatedDataset(dataset, self._gate)
        loader = DataLoader(
            dataset,
            batch_size=config.batch_size,
            sampler=InfiniteSampler(len(dataset), self.seed),  # type: ignore[arg-type]
            num_workers=config.num_workers,
            pin_memory=config.pin_memory and dev.pin_memory_available(),
            drop_last=True,
            collate_fn=spec.collate_fn,
        )
        return to_device_batches(spec, config, loader, self.device, self.channels_last)

    def next(self) -> Batch:
        """The next device-ready batch (starts the workers on first use)."""
        if self._iterator is None:
            self._iterator = self._start()
        return next(self._iterator)

    def pause(self) -> None:
        """Stop the workers from reading ahead (until :meth:`resume`)."""
        if self._gate is not None:
            self._gate.clear()

    def resume(self) -> None:
        """Let the workers read again."""
        if self._gate is not None:
            self._gate.set()

    def close(self) -> None:
        """Shut the workers down (opens the gate first so they can see the shutdown)."""
        self.resume()
        iterator, self._iterator = self._iterator, None
        if iterator is not None and hasattr(iterator, "close"):
            iterator.close()
        del iterator
        close = getattr(self._custom, "close", None)
        if callable(close):
            close()
        self._custom = None


class _Restarting:
    """Iterates an iterable forever, starting a new pass when one ends."""

    def __init__(self, iterable: Iterable[Batch]) -> None:
        self.iterable = iterable
        self.iterator = iter(iterable)

    def __iter__(self) -> "_Restarting":
        return self

    def __next__(self) -> Batch:
        try:
            return next(self.iterator)
        except StopIteration:
            self.iterator = iter(self.iterable)
            return next(self.iterator)


# Seed of the permutation the loss check draws its samples from (the same for every configuration).
CHECK_ORDER_SEED = 0
SHUFFLED = "shuffled"
INDEX_ORDER = "index"


def check_order(config: RunConfig) -> str:
    """The sample order a configuration's loss check uses: custom loaders can only give index order."""
    return SHUFFLED if config.loader == TORCH_LOADER else INDEX_ORDER


def check_batches(
    spec: JobSpec,
    config: RunConfig,
    device: torch.device,
    channels_last: bool,
    batch_size: int,
    count: int,
    order: str | None = None,
) -> list[Batch]:
    """The loss check's batches, device-ready: ``count * batch_size`` samples, the same for every config.

    ``order`` "shuffled" (the default for DataLoader pipelines) takes the first samples of a fixed
    permutation, so class-sorted datasets still give mixed batches; "index" takes samples 0, 1, ...
    (what a custom loader's evaluation mode yields). Each sample is fetched with torch's generator
    seeded by its index, so random torchvision transforms draw the same crop for the float and the
    uint8 variant of the dataset.
    """
    order = order or check_order(config)
    if config.loader != TORCH_LOADER:
        if order != INDEX_ORDER:
            raise UsageError(f"loader {config.loader!r} can only give its samples in index order")
        custom = find_loader(spec, config.loader)
        request = LoaderRequest(batch_size, max(config.num_workers, 1), device, channels_last, False, 0)
        iterable = custom.build(request)
        batches: list[Batch] = []
        for batch in iterable:
            batches.append(batch)
            if len(batches) == count:
                break
        close = getattr(iterable, "close", None)
        if callable(close):
            close()
        if len(batches) < count:
            raise UsageError(
                f"loader {config.loader!r} gave {len(batches)} evaluation batches, the loss check needs {count}"
            )
        return batches
    if config.uint8:
        dataset = spec.check_uint8_dataset or spec.uint8_dataset
    else:
        dataset = spec.check_dataset or spec.dataset
    collate = spec.collate_fn or default_collate
    needed = batch_size * count
    size = len(dataset)  # type: ignore[arg-type]
    if size < needed:
        raise UsageError(f"the loss check needs {needed} samples; job {spec.name!r} has {size}")
    if order == SHUFFLED:
        generator = torch.Generator().manual_seed(CHECK_ORDER_SEED)
        indices = torch.randperm(size, generator=generator)[:needed].tolist()
    else:
        indices = list(range(needed))
    host = []
    for b in range(count):
        samples = []
        for index in indices[b * batch_size : (b + 1) * batch_size]:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(index)
                samples.append(dataset[index])  # type: ignore[index]
        host.append(collate(samples))
    return list(to_device_batches(spec, config, host, device, channels_last))
