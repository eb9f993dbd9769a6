"""One point on the ladder: the input pipeline settings plus the training step's :class:`TrainConfig`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from stave.errors import UsageError
from stave.train.config import TrainConfig

TORCH_LOADER = "torch"


@dataclass(frozen=True)
class RunConfig:
    """Everything a rung can change.

    ``loader`` is "torch" (a ``DataLoader`` over the job's dataset) or the name of one of the job's
    custom loaders; ``uint8`` sends images as uint8 and normalizes them on the device;
    ``pin_memory`` pins host batches and copies them with ``non_blocking=True`` (GPU only).
    """

    batch_size: int
    num_workers: int = 0
    pin_memory: bool = False
    # metadata "numeric": the setting can change what the step computes (the ladder checks the loss).
    uint8: bool = field(default=False, metadata={"numeric": True})
    loader: str = field(default=TORCH_LOADER, metadata={"numeric": True})
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise UsageError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.num_workers < 0:
            raise UsageError(f"num_workers must be >= 0, got {self.num_workers}")

    @staticmethod
    def numeric_settings() -> tuple[str, ...]:
        """The settings (keys of :meth:`to_dict`) that can change what the step computes."""
        own = tuple(f.name for f in fields(RunConfig) if f.metadata.get("numeric"))
        return own + TrainConfig.numeric_settings()

    def with_changes(self, **changes: Any) -> "RunConfig":
        """A copy with loader fields or training-step settings (by name) changed."""
        train_changes = {k: v for k, v in changes.items() if TrainConfig.accepts(k)}
        own = {k: v for k, v in changes.items() if k not in train_changes}
        train = self.train.with_changes(**train_changes) if train_changes else self.train
        return replace(self, train=train, **own)

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON-able dict: loader settings and train settings side by side."""
        out = {k: v for k, v in asdict(self).items() if k != "train"}
        out.update(self.train.to_dict())
        return out

    def changes_from(self, other: "RunConfig") -> dict[str, Any]:
        """The settings whose values differ from ``other``'s, with this config's values."""
        mine, theirs = self.to_dict(), other.to_dict()
        return {k: v for k, v in mine.items() if theirs.get(k) != v}


def describe_changes(changes: dict[str, Any]) -> str:
    """Short human text for a set of changed settings: ``batch_size=256, precision=bf16``."""
    return ", ".join(f"{k}={v}" for k, v in changes.items()) or "no change"
