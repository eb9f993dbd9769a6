"""The job spec: what ``stave bench ladder --job MODULE:FUNCTION`` needs to know about a training job.

``FUNCTION`` takes no arguments and returns a :class:`JobSpec` (or a dict of its fields). Only the
first six fields are required; the optional ones unlock rungs (``uint8_dataset`` + ``mean``/``std``
for the uint8 transfer rung, ``loaders`` for an alternative input pipeline) or describe the job
(``set_to_none`` as its ``zero_grad`` call passes it, ``unit`` for token models). docs/bench.md
shows a complete example.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Iterable, Sequence

import torch
from torch import nn
from torch.utils.data import Dataset

from stave.errors import UsageError

UNITS = ("samples", "tokens")


@dataclass(frozen=True)
class LoaderRequest:
    """What a custom loader is asked for: batches of ``batch_size`` ready on ``device``.

    ``train`` False asks for the deterministic evaluation order and transform (the loss check
    compares its first batches with ``JobSpec.check_dataset``'s first samples, in index order).
    """

    batch_size: int
    num_workers: int
    device: torch.device
    channels_last: bool
    train: bool
    seed: int


@dataclass(frozen=True)
class CustomLoader:
    """An alternative input pipeline, tried as its own rung.

    ``build(request)`` returns an iterable of ``(inputs, targets)`` already on ``request.device``
    (normalized, in ``float32``), endless or at least one epoch long (the ladder restarts it).
    ``code`` is how a user builds it, shown in the final configuration when it is kept.
    """

    name: str
    build: Callable[[LoaderRequest], Iterable[tuple[Any, torch.Tensor]]]
    description: str = ""
    code: str = ""


@dataclass(frozen=True)
class JobSpec:
    """A training job reduced to its parts; the ladder rebuilds it under each configuration.

    Required: ``name``; ``model`` (a factory returning a fresh, randomly initialized module);
    ``dataset`` (map-style, yielding ``(input, target)`` as the job's own pipeline does);
    ``loss`` (``loss(outputs, targets) -> scalar tensor``); ``optimizer`` (a factory called with
    the model, on its device); ``batch_size`` (the job's own).

    Optional: ``num_workers`` (the job's DataLoader setting); ``set_to_none`` (what its
    ``zero_grad`` passes); ``uint8_dataset`` (the same samples as uint8 CHW tensors, without
    ToTensor/Normalize) with ``mean``/``std`` (in [0, 1] units) for the normalize-on-device rung;
    ``check_dataset``/``check_uint8_dataset`` (deterministic variants for the loss check when the
    training transform is random and its randomness is not drawn from torch's generator);
    ``loaders`` (custom input pipelines, each a rung); ``unit`` ("samples", or "tokens" with
    ``items_per_sample`` tokens per sample); ``collate_fn``; ``image_inputs`` (None: decided from
    the model, True when it has 2-D convolutions, which is when channels_last applies).
    """

    name: str
    model: Callable[[], nn.Module]
    dataset: Dataset
    loss: Callable[[Any, torch.Tensor], torch.Tensor]
    optimizer: Callable[[nn.Module], torch.optim.Optimizer]
    batch_size: int
    num_workers: int = 0
    set_to_none: bool = True
    uint8_dataset: Dataset | None = None
    mean: Sequence[float] | None = None
    std: Sequence[float] | None = None
    check_dataset: Dataset | None = None
    check_uint8_dataset: Dataset | None = None
    loaders: tuple[CustomLoader, ...] = ()
    unit: str = "samples"
    items_per_sample: int = 1
    collate_fn: Callable[[list[Any]], Any] | None = None
    image_inputs: bool | None = None
    description: str = ""

    def __post_init__(self) -> None:
        for name in ("model", "loss", "optimizer"):
            if not callable(getattr(self, name)):
                raise UsageError(
                    f"job {self.name!r}: {name} must be callable, got {type(getattr(self, name)).__name__}"
                )
        if not hasattr(self.dataset, "__getitem__") or not hasattr(self.dataset, "__len__"):
            raise UsageError(f"job {self.name!r}: dataset must be map-style (__getitem__ and __len__)")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise UsageError(f"job {self.name!r}: batch_size must be a positive int, got {self.batch_size!r}")
        if len(self.dataset) < self.batch_size:  # type: ignore[arg-type]
            raise UsageError(
                f"job {self.name!r}: dataset has {len(self.dataset)} samples, fewer than one batch of {self.batch_size}"  # type: ignore[arg-type]
            )
        if not isinstance(self.num_workers, int) or self.num_workers < 0:
            raise UsageError(f"job {self.name!r}: num_workers must be an int >= 0, got {self.num_workers!r}")
        if self.unit not in UNITS:
            raise UsageError(f"job {self.name!r}: unit must be one of {', '.join(UNITS)}, got {self.unit!r}")
        if self.items_per_sample < 1:
            raise UsageError(f"job {self.name!r}: items_per_sample must be >= 1, got {self.items_per_sample}")
        if (self.mean is None) != (self.std is None):
            raise UsageError(f"job {self.name!r}: give both mean and std, or neither")
        if self.mean is not None and self.std is not None:
            if len(self.mean) != len(self.std):
                raise UsageError(f"job {self.name!r}: mean has {len(self.mean)} values, std {len(self.std)}")
            if any(s <= 0 for s in self.std):
                raise UsageError(f"job {self.name!r}: std values must be > 0, got {list(self.std)}")
        if self.uint8_dataset is not None and self.mean is None:
            raise UsageError(f"job {self.name!r}: uint8_dataset needs mean and std to normalize on the device")
        names = [loader.name for loader in self.loaders]
        if len(set(names)) != len(names) or "torch" in names:
            raise UsageError(f"job {self.name!r}: custom loader names must be unique and not 'torch': {names}")

    @property
    def normalize(self) -> tuple[Sequence[float], Sequence[float]] | None:
        """(mean, std) when the job normalizes images, else None."""
        if self.mean is None or self.std is None:
            return None
        return (self.mean, self.std)


def spec_from(value: Any, origin: str) -> JobSpec:
    """Accept what a job function returned: a :class:`JobSpec`, or a dict of its fields."""
    if isinstance(value, JobSpec):
        return value
    if isinstance(value, dict):
        known = {f.name for f in fields(JobSpec)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise UsageError(f"{origin} returned unknown spec fields {unknown}; known: {sorted(known)}")
        missing = [n for n in ("model", "dataset", "loss", "optimizer", "batch_size") if n not in value]
        if missing:
            raise UsageError(f"{origin} returned a spec without {', '.join(missing)} (see docs/bench.md)")
        return JobSpec(**{"name": origin, **value})
    raise UsageError(f"{origin} must return a stave.bench.JobSpec or a dict, got {type(value).__name__}")
