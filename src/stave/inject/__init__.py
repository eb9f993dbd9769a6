"""Fixes applied to the user's unmodified script from the outside, one declared unit each.

A :class:`~stave.inject.unit.FixUnit` says what it changes (in words, and as the step-model input
it changes), how it is applied in-process before and while the script runs, how it is undone, and
when it does not apply. :mod:`stave.inject.selection` parses the validated JSON that selects
fixes; :mod:`stave.inject.child` runs a script with them in a child process and records its step
times, first losses and input statistics; :mod:`stave.inject.launch` starts that child and reads
its result. ``stave doctor --verify`` and ``stave bench ladder SCRIPT`` build on these.
"""

from __future__ import annotations

from stave.inject.registry import all_units, get_unit
from stave.inject.selection import FixRequest, Selection, parse_selection
from stave.inject.machine import Machine
from stave.inject.unit import Applied, FixUnit, Param

__all__ = ["Applied", "FixRequest", "FixUnit", "Machine", "Param", "Selection", "all_units", "get_unit",
           "parse_selection"]
