"""What torch.compile did during the run: frames compiled, time compiling, why it recompiled.

Read from TorchDynamo's own counters (``torch._dynamo.utils``), only when the script imported
dynamo (reading them never imports it: an eager script pays nothing). These are private torch
APIs, so every read is guarded: a torch that moved them gives ``None``, never an error.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

# Recompile reasons kept in the record: the first few name the changing shape; later ones repeat it.
MAX_REASONS = 8
# Dynamo's timer around one frame's compilation (tracing, guards, backend): the compile cost.
_COMPILE_TIMER = "_compile.compile_inner"


@dataclass
class CompileStats:
    """Cumulative since the process started: frames compiled, seconds compiling, guard failures."""

    frames: int = 0
    compile_s: float = 0.0
    reasons: list[str] = field(default_factory=list)


def read_compile_stats() -> CompileStats | None:
    """Dynamo's counters now, or ``None`` when dynamo was never imported or they cannot be read."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return None
    try:
        frames = int(utils.counters["frames"]["total"])
        compile_s = float(sum(utils.compilation_time_metrics.get(_COMPILE_TIMER, [])))
        reasons: list[str] = []
        for failures in utils.guard_failures.values():
            for reason in failures:
                text = str(reason)
                if text not in reasons:
                    reasons.append(text)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        log.debug("torch._dynamo counters unreadable: %s", exc)
        return None
    return CompileStats(frames=frames, compile_s=compile_s, reasons=reasons[:MAX_REASONS])


def frames_total() -> int | None:
    """Frames dynamo has compiled so far (one counter read; None when dynamo was never imported)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return None
    try:
        return int(utils.counters["frames"]["total"])
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
