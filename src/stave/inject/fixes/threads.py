"""torch's intra-op thread pool: the size the fix names, whatever the script asks for later."""

from __future__ import annotations

import functools
from typing import Any

import torch

from stave.inject.patches import patch_attr
from stave.inject.registry import register
from stave.inject.machine import Machine
from stave.inject.unit import Applied, FixUnit, Param


def _apply(applied: Applied, params: dict[str, Any], machine: Machine) -> None:
    threads = params["threads"]
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    applied.on_undo(lambda: torch.set_num_threads(previous))

    def set_num_threads(n: int) -> None:
        # The script's own call (a config from a bigger machine) is what the fix replaces.
        if n != threads:
            applied.hits += 1
            applied.note(f"the script asked for {n} threads; kept {threads}")

    patch_attr(applied, torch, "set_num_threads", functools.wraps(torch.set_num_threads)(set_num_threads))
    # Threads set before the script ran count too (OMP_NUM_THREADS read at import).
    if previous != threads:
        applied.hits += 1
        applied.note(f"{previous} threads at start; set {threads}")


THREADS = register(FixUnit(
    id="threads",
    title="torch intra-op threads",
    changes="torch.set_num_threads(n) before the script runs; the script's own calls keep n",
    params=(Param("threads", "int", "intra-op threads", required=True, minimum=1),),
    apply=_apply,
    undo_doc="torch.set_num_threads restored and the previous thread count set back",
    no_hit="the thread count was already the one asked for",
    model_input="compute_threads",
))
