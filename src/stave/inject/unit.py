"""The declared unit of an injectable fix: what it changes, how it is applied and undone, when it does not apply."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from stave.errors import UsageError
from stave.inject.machine import Machine

# A parameter's accepted Python types by its declared kind (bool is not an int here: JSON true
# for a worker count is a mistake, not 1).
_KINDS: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,)}


@dataclass(frozen=True)
class Param:
    """One parameter of a fix: name, kind ("int", "float", "str", "bool"), default, allowed values.

    ``default`` None with ``required`` False means "the unit decides" (autocast picks the device's dtype).
    """

    name: str
    kind: str
    doc: str
    default: Any = None
    required: bool = False
    minimum: float | None = None
    choices: tuple[Any, ...] = ()

    def check(self, unit_id: str, value: Any) -> Any:
        """``value`` if it is valid for this parameter; :class:`UsageError` naming it otherwise."""
        types = _KINDS[self.kind]
        if isinstance(value, bool) and self.kind != "bool" or not isinstance(value, types):
            raise UsageError(f"fix {unit_id}: {self.name} must be {self.kind}, got {value!r}")
        if self.minimum is not None and value < self.minimum:
            raise UsageError(f"fix {unit_id}: {self.name} must be >= {self.minimum:g}, got {value!r}")
        if self.choices and value not in self.choices:
            raise UsageError(f"fix {unit_id}: {self.name} must be one of {list(self.choices)}, got {value!r}")
        return value


@dataclass
class Applied:
    """A fix installed in this process: how to undo it and what it did while the script ran.

    ``hits``: times the fix changed something (a DataLoader built, a forward wrapped, an optimizer
    switched); 0 at the end means it found nothing to change, and ``notes`` say why.
    """

    unit_id: str
    params: dict[str, Any]
    undo_steps: list[Callable[[], None]] = field(default_factory=list)
    hits: int = 0
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        """Keep a note (once) on what the fix did or why it left something alone."""
        if text not in self.notes:
            self.notes.append(text)

    def on_undo(self, step: Callable[[], None]) -> None:
        """Register an undo step (run in reverse order of registration)."""
        self.undo_steps.append(step)

    def undo(self) -> None:
        """Restore everything the fix changed (idempotent)."""
        while self.undo_steps:
            self.undo_steps.pop()()

    def to_dict(self) -> dict[str, Any]:
        """What the child reports about this fix."""
        return {"id": self.unit_id, "params": dict(self.params), "hits": self.hits, "notes": list(self.notes)}


ApplyFn = Callable[[Applied, dict[str, Any], Machine], None]
# (params, machine) -> None when the fix applies, else the reason it does not.
ApplicableFn = Callable[[dict[str, Any], Machine], "str | None"]


def _always(params: dict[str, Any], machine: Machine) -> str | None:
    return None


@dataclass(frozen=True)
class FixUnit:
    """One injectable fix, declared once.

    ``changes``: what it changes, in words. ``model_input``: the step-model input (see
    :class:`stave.analyze.step_model.StepInputs`) it changes, or None. ``numeric``: it can change
    what the step computes (precision, summation order), so a loss check matters.
    ``changes_learning``: it changes what is learned per step (batch size, learning rate): never
    applied without the explicit flag, and reported as such. ``apply(applied, params, machine)``
    installs it and registers its undo steps on ``applied``; ``applicable(params, machine)``
    returns the reason it does not apply on this machine (None: it does). ``no_hit``: what a run
    in which it changed nothing means ("the script built no DataLoader").
    """

    id: str
    title: str
    changes: str
    params: tuple[Param, ...]
    apply: ApplyFn
    undo_doc: str
    no_hit: str
    model_input: str | None = None
    numeric: bool = False
    changes_learning: bool = False
    applicable: ApplicableFn = _always
    gpu_only: bool = False

    def validated(self, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` checked against the declared ones, defaults filled in."""
        if not isinstance(params, dict):
            raise UsageError(f"fix {self.id}: params must be an object, got {params!r}")
        known = {p.name: p for p in self.params}
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise UsageError(f"fix {self.id}: unknown parameter(s) {unknown}; it takes {sorted(known) or 'none'}")
        out: dict[str, Any] = {}
        for p in self.params:
            if p.name in params and params[p.name] is not None:
                out[p.name] = p.check(self.id, params[p.name])
            elif p.required:
                raise UsageError(f"fix {self.id}: parameter {p.name} is required ({p.doc})")
            else:
                out[p.name] = p.default
        return out

    def not_applicable(self, params: dict[str, Any], machine: Machine) -> str | None:
        """Why this fix does not apply on ``machine`` (None when it does)."""
        if self.gpu_only and not machine.cuda:
            return f"no GPU ({self.title} only changes GPU work)"
        return self.applicable(params, machine)

    def install(self, params: dict[str, Any], machine: Machine) -> Applied:
        """Apply the fix in this process; the returned :class:`Applied` undoes it."""
        applied = Applied(self.id, dict(params))
        try:
            self.apply(applied, params, machine)
        except BaseException:
            applied.undo()
            raise
        return applied
