"""Installing a selection of fixes in this process, and what became of each."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from stave.inject.machine import Machine
from stave.inject.registry import get_unit
from stave.inject.selection import Selection
from stave.inject.unit import Applied

log = logging.getLogger(__name__)


@dataclass
class Installed:
    """The fixes of a selection in this process: those installed and those that do not apply here."""

    applied: list[Applied] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)

    def undo(self) -> None:
        """Undo every installed fix, the last installed first."""
        for applied in reversed(self.applied):
            applied.undo()

    def report(self) -> list[dict[str, Any]]:
        """One entry per selected fix: ``status`` "applied" (it changed something), "no_effect" (it found
        nothing to change: ``reason`` says what) or "not_applicable" (``reason``), with hits and notes."""
        out = list(self.skipped)
        for applied in self.applied:
            unit = get_unit(applied.unit_id)
            assert unit is not None
            entry = applied.to_dict()
            entry["changes_learning"] = unit.changes_learning
            if applied.hits:
                entry["status"], entry["reason"] = "applied", None
            else:
                entry["status"] = "no_effect"
                entry["reason"] = "; ".join(applied.notes) or unit.no_hit
            out.append(entry)
        return out


def install(selection: Selection, machine: Machine) -> Installed:
    """Install each selected fix that applies on ``machine``, in order; the rest are reported with their reason.

    A fix that fails while installing undoes what was installed before it and re-raises.
    """
    installed = Installed()
    try:
        for request in selection.fixes:
            unit = get_unit(request.id)
            assert unit is not None, request.id  # the selection was validated against the registry
            params = request.param_dict
            reason = unit.not_applicable(params, machine)
            if reason is not None:
                log.info("fix %s does not apply: %s", request.id, reason)
                installed.skipped.append({"id": request.id, "params": params, "hits": 0, "notes": [],
                                          "changes_learning": unit.changes_learning,
                                          "status": "not_applicable", "reason": reason})
                continue
            installed.applied.append(unit.install(params, machine))
    except BaseException:
        installed.undo()
        raise
    return installed
