"""Which fixes a run applies, as validated JSON: what the child process receives on its command line.

The JSON is an object ``{"fixes": [{"id": "num_workers", "params": {"num_workers": 2}}, ...],
"allow_learning_changes": false}``. Every id must name a registered unit, every parameter must be
one it declares, and a unit that changes what is learned per step (batch size, learning rate) is
refused unless ``allow_learning_changes`` is true. Errors are one-line :class:`UsageError`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from stave.errors import UsageError
from stave.inject.registry import all_units, get_unit


@dataclass(frozen=True)
class FixRequest:
    """One fix and its parameters (validated: defaults filled in)."""

    id: str
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def param_dict(self) -> dict[str, Any]:
        """The parameters as a dictionary."""
        return dict(self.params)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"id": self.id, "params": self.param_dict}

    def label(self) -> str:
        """``id(k=v, ...)`` for reports (parameters left to the unit are omitted)."""
        shown = ", ".join(f"{k}={v}" for k, v in self.params if v is not None)
        return f"{self.id}({shown})" if shown else self.id


@dataclass(frozen=True)
class Selection:
    """The fixes of one run, in the order they are applied."""

    fixes: tuple[FixRequest, ...] = ()
    allow_learning_changes: bool = False

    def to_json(self) -> str:
        """The JSON the child parses back with :func:`parse_selection`."""
        return json.dumps({"fixes": [f.to_dict() for f in self.fixes],
                           "allow_learning_changes": self.allow_learning_changes}, sort_keys=True)

    def changes_learning(self) -> list[str]:
        """Ids of the selected fixes that change what is learned per step."""
        return [f.id for f in self.fixes if (u := get_unit(f.id)) is not None and u.changes_learning]


def request(unit_id: str, allow_learning_changes: bool = False, **params: Any) -> FixRequest:
    """A validated :class:`FixRequest` for ``unit_id`` with ``params``."""
    unit = get_unit(unit_id)
    if unit is None:
        known = ", ".join(u.id for u in all_units())
        raise UsageError(f"no injectable fix named {unit_id!r} (known: {known})")
    if unit.changes_learning and not allow_learning_changes:
        raise UsageError(f"fix {unit_id} changes what is learned per step ({unit.changes}); "
                         "it is applied only with the explicit allow-learning-changes flag")
    values = unit.validated(params)
    return FixRequest(unit_id, tuple(values.items()))


def selection(*requests: FixRequest, allow_learning_changes: bool = False) -> Selection:
    """A :class:`Selection` of already validated requests; each id at most once."""
    ids = [r.id for r in requests]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise UsageError(f"fix(es) selected twice: {dup}")
    return Selection(tuple(requests), allow_learning_changes)


def parse_selection(text: str) -> Selection:
    """Parse and validate the selection JSON (see the module docstring)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"fix selection is not valid JSON: {exc.msg} at position {exc.pos}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("fixes", []), list):
        raise UsageError('fix selection must be an object {"fixes": [{"id": ..., "params": {...}}, ...]}')
    unknown = sorted(set(data) - {"fixes", "allow_learning_changes"})
    if unknown:
        raise UsageError(f"fix selection: unknown key(s) {unknown}")
    allow = data.get("allow_learning_changes", False)
    if not isinstance(allow, bool):
        raise UsageError(f"fix selection: allow_learning_changes must be true or false, got {allow!r}")
    requests = []
    for item in data.get("fixes", []):
        if not isinstance(item, dict) or not isinstance(item.get("id"), str) or set(item) - {"id", "params"}:
            raise UsageError(f'fix selection: each fix is {{"id": NAME, "params": {{...}}}}, got {item!r}')
        params = item.get("params", {})
        if not isinstance(params, dict):
            raise UsageError(f"fix {item['id']}: params must be an object, got {params!r}")
        requests.append(request(item["id"], allow_learning_changes=allow, **params))
    return selection(*requests, allow_learning_changes=allow)
