"""stave.bench: the optimization ladder, measured on the user's own hardware.

:func:`run_ladder` climbs the rungs of :mod:`stave.bench.rungs` for a :class:`JobSpec` (a
built-in workload from :mod:`stave.bench.workloads`, or the user's own through ``--job``), keeping
a rung only when it is faster beyond the measured noise and its losses match the fp32 reference.
The CLI is ``stave bench ladder`` / ``stave tune``; ``python -m benchmarks.run_all`` runs every
benchmark of the project. Imports are lazy so ``import stave.bench`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["CustomLoader", "JobSpec", "LadderOptions", "LadderResult", "LoaderRequest", "run_ladder"]

_EXPORTS = {
    "CustomLoader": ("stave.bench.spec", "CustomLoader"),
    "JobSpec": ("stave.bench.spec", "JobSpec"),
    "LoaderRequest": ("stave.bench.spec", "LoaderRequest"),
    "LadderOptions": ("stave.bench.ladder", "LadderOptions"),
    "LadderResult": ("stave.bench.result", "LadderResult"),
    "run_ladder": ("stave.bench.ladder", "run_ladder"),
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        module, attr = _EXPORTS[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'stave.bench' has no attribute {name!r}")
