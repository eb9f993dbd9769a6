"""The registry of fix units: each fix module registers its units on import."""

from __future__ import annotations

import importlib

from stave.inject.unit import FixUnit

_UNITS: dict[str, FixUnit] = {}
# The modules that declare units, imported on first use (one concept each).
_FIX_MODULES = ("loader", "threads", "precision", "layout", "gpu_flags", "optimizer", "compile", "learning")


def register(unit: FixUnit) -> FixUnit:
    """Add ``unit``; its id must be new."""
    if unit.id in _UNITS:
        raise ValueError(f"a fix unit with id {unit.id!r} is registered already")
    _UNITS[unit.id] = unit
    return unit


def _load() -> None:
    for name in _FIX_MODULES:
        importlib.import_module(f"stave.inject.fixes.{name}")


def get_unit(unit_id: str) -> FixUnit | None:
    """The unit ``unit_id``, or None."""
    _load()
    return _UNITS.get(unit_id)


def all_units() -> list[FixUnit]:
    """Every unit, in registration order."""
    _load()
    return list(_UNITS.values())
