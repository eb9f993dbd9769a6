"""torch.compile of the model's forward, found at its first training call.

The module's ``forward`` is replaced on the instance by its compiled version; the module's own
``__call__`` (and so every hook on it) stays eager. The first call itself runs eagerly (it is
already under way when the model is recognised); compilation happens on the second.
Compile time lands in the first compiled steps: a run must be long enough for its warm-up to
absorb it.
"""

from __future__ import annotations

from typing import Any

import torch

from stave.inject.machine import Machine
from stave.inject.outermost import Listener, has_parameters, is_training_call, listen
from stave.inject.registry import register
from stave.inject.unit import Applied, FixUnit, Param


def _applicable(params: dict[str, Any], machine: Machine) -> str | None:
    if not machine.cuda and not machine.has_compiler:
        return "no C++ compiler on PATH: inductor cannot build its CPU kernels"
    return None


def _apply(applied: Applied, params: dict[str, Any], machine: Machine) -> None:
    mode = params["mode"]
    done: set[int] = set()
    compiled: list[torch.nn.Module] = []

    def enter(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        key = id(module)
        if key in done or not is_training_call(module) or not has_parameters(module):
            return None
        done.add(key)
        if "forward" in module.__dict__:
            applied.note(f"{type(module).__name__}.forward is already replaced on the instance: left alone")
            return None
        module.forward = torch.compile(module.forward, mode=mode)  # type: ignore[method-assign]
        compiled.append(module)
        applied.hits += 1
        return None

    applied.on_undo(listen(Listener(enter, None)))

    def uncompile() -> None:
        for module in compiled:
            module.__dict__.pop("forward", None)

    applied.on_undo(uncompile)


COMPILE = register(FixUnit(
    id="compile",
    title="torch.compile",
    changes="each trained module's forward compiled with torch.compile (inductor) from its second call on",
    params=(Param("mode", "str", "torch.compile mode", default=None,
                  choices=("default", "reduce-overhead", "max-autotune")),),
    apply=_apply,
    undo_doc="the compiled forward removed from each module (its class's forward shows again)",
    no_hit="no module with parameters was called in training mode",
    model_input="phases_s.forward",
    numeric=True,
    applicable=_applicable,
))
