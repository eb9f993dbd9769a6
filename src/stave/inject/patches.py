"""Attribute patches that remember what they replaced, so every fix can be undone exactly."""

from __future__ import annotations

from typing import Any

from stave.inject.unit import Applied


def patch_attr(applied: Applied, owner: Any, name: str, value: Any) -> Any:
    """Set ``owner.name = value`` and register its restoration on ``applied``; returns the original
    (as ``getattr`` gives it, for the replacement to call)."""
    original = getattr(owner, name)
    own = isinstance(owner, type) and name not in owner.__dict__
    # The raw descriptor (staticmethod, classmethod) goes back, not the function getattr unwrapped.
    raw = None if own else (owner.__dict__[name] if isinstance(owner, type) else original)
    setattr(owner, name, value)

    def restore() -> None:
        if own:
            delattr(owner, name)  # it was inherited: remove the override, the base's shows again
        else:
            setattr(owner, name, raw)

    applied.on_undo(restore)
    return original
