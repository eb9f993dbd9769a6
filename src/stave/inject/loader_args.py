"""Rewriting the arguments of every ``DataLoader`` the script builds, through one shared patch.

Several fixes change loader settings (workers, then persistence and prefetch that only mean
something with workers), so they share one patch of ``DataLoader.__init__`` that binds the call's
arguments, lets each override rewrite them in a fixed order, and calls the original. Subclasses
that call ``super().__init__`` pass through it too.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable

from torch.utils.data import DataLoader

from stave.inject.unit import Applied

# Order in which overrides see the arguments: the batch first (batched fetch reads it), workers
# before the settings that need workers.
ORDER_BATCH_SIZE = 0
ORDER_NUM_WORKERS = 10
ORDER_WORKER_SETTINGS = 20
ORDER_PIN = 30
ORDER_FETCH = 40

# An override rewrites the bound arguments of one DataLoader(...) call in place.
OverrideFn = Callable[[dict[str, Any]], None]


@dataclass(eq=False)
class _Override:
    order: int
    fn: OverrideFn


class _LoaderPatch:
    def __init__(self) -> None:
        self.overrides: list[_Override] = []
        self.original: Any = None

    def _install(self) -> None:
        original = DataLoader.__init__
        signature = inspect.signature(original)
        patch = self

        @functools.wraps(original)
        def init(loader: Any, *args: Any, **kwargs: Any) -> None:
            bound = signature.bind(loader, *args, **kwargs)
            bound.apply_defaults()
            arguments = dict(bound.arguments)
            arguments.pop("self", None)
            extra = arguments.pop("kwargs", {}) if "kwargs" in signature.parameters else {}
            for override in sorted(patch.overrides, key=lambda o: o.order):
                override.fn(arguments)
            original(loader, **arguments, **extra)

        self.original = original
        DataLoader.__init__ = init  # type: ignore[method-assign]

    def add(self, override: _Override) -> None:
        if not self.overrides:
            self._install()
        self.overrides.append(override)

    def remove(self, override: _Override) -> None:
        if override in self.overrides:
            self.overrides.remove(override)
        if not self.overrides and self.original is not None:
            DataLoader.__init__ = self.original  # type: ignore[method-assign]
            self.original = None


_PATCH = _LoaderPatch()


def override_loader_args(applied: Applied, order: int, fn: OverrideFn) -> None:
    """Run ``fn`` on the arguments of every DataLoader built from now on, until ``applied`` is undone."""
    override = _Override(order, fn)
    _PATCH.add(override)
    applied.on_undo(lambda: _PATCH.remove(override))


def dataset_kind(arguments: dict[str, Any]) -> str:
    """ "iterable" for an IterableDataset, else "map"."""
    from torch.utils.data import IterableDataset

    return "iterable" if isinstance(arguments.get("dataset"), IterableDataset) else "map"
