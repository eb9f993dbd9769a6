"""Settings of the training step that a ladder rung brings in its own file.

:class:`~stave.train.config.TrainConfig`'s fields are stave.train's public settings. A new
optimization does not need to edit them: its file declares a :class:`Switch` (name, default,
whether it can change the arithmetic, how :func:`~stave.train.step.build_step` applies it, the
code :func:`~stave.train.snippet.snippet` prints) and registers it here; ``TrainConfig`` then
takes it by name (``config.with_changes(name=value)``), and the ladder's rung that proposes it is
declared beside it (:func:`stave.bench.rungs.rung`). See ``stave/bench/added_rungs/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Switch:
    """One setting of the step, declared once.

    ``apply(model, device, value) -> model`` runs in ``build_step`` after the model is on its
    device and before the optimizer is built; ``code(value) -> lines`` are the set-up lines of the
    printed configuration; ``numeric``: the setting can change what the step computes (the ladder
    then checks the loss against the reference), as precision does and zero_grad(set_to_none) does not.
    Values must be hashable (configurations are dictionary keys) and JSON-able (they go into the
    ladder's ``stave.bench/1`` report).
    """

    name: str
    default: Any
    numeric: bool
    apply: Callable[[Any, Any, Any], Any]
    code: Callable[[Any], list[str]]
    doc: str = ""


_SWITCHES: dict[str, Switch] = {}
# Names a switch may not take: TrainConfig's own fields (it reserves them on import).
_RESERVED: set[str] = set()


def reserve(names: tuple[str, ...]) -> None:
    """Names that are settings already (``TrainConfig``'s fields)."""
    _RESERVED.update(names)


def register_switch(switch: Switch) -> Switch:
    """Make ``switch`` a setting ``TrainConfig`` accepts; its name must be new."""
    if switch.name in _SWITCHES or switch.name in _RESERVED:
        raise ValueError(f"a training-step setting named {switch.name!r} exists already")
    _SWITCHES[switch.name] = switch
    return switch


def get_switch(name: str) -> Switch | None:
    """The registered switch ``name``, or None."""
    return _SWITCHES.get(name)


def registered_switches() -> list[Switch]:
    """Every registered switch, in registration order."""
    return list(_SWITCHES.values())
