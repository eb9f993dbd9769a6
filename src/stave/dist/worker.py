"""What a rank needs around its doctor run (:func:`stave.doctor.rank.run_rank`): SIGTERM handling
and tearing the process group down.

Each rank runs the user's script in-process under a :class:`~stave.capture.session.DoctorSession`
that rewrites the rank's record atomically every ``record_interval_s`` (and once at start), so a
rank killed at any point leaves what it had measured. ``--steps N`` stops every rank after the
same optimizer step: DDP keeps ranks in lockstep (each step's all-reduce needs all of them), so
step N is the same step everywhere, and no rank starts a collective the others will not join.
The process group is then destroyed before the final record is written.

A SIGTERM (torchrun's way of stopping the surviving ranks when one fails) is turned into an
interruption of the script, so the rank still writes its final record on the way out.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from types import FrameType
from typing import Iterator


log = logging.getLogger(__name__)

# torchrun waits 30 s after its SIGTERM before it kills; a rank rewrites its record at least this
# often (seconds), so even a rank killed outright has lost at most this much of its measurements.
DEFAULT_RECORD_INTERVAL_S = 10.0


class _Sigterm:
    """SIGTERM state: ``fired`` once one came; ``armed`` while it should interrupt the script."""

    def __init__(self) -> None:
        self.fired = False
        self.armed = True


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[_Sigterm]:
    """While inside and armed, SIGTERM raises KeyboardInterrupt in the main thread.

    Disarm it once the script is over: a SIGTERM during the wrap-up is then only noted, so the
    final record still gets written (the launcher's SIGKILL follows 30 s later if it must).
    """
    state = _Sigterm()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        state.fired = True
        if state.armed:
            raise KeyboardInterrupt("SIGTERM")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield state
    finally:
        signal.signal(signal.SIGTERM, previous)


def shutdown_process_group() -> bool:
    """Destroy the default process group if the script left it up; True when one was destroyed."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return False
    try:
        dist.destroy_process_group()
    except RuntimeError as exc:  # a peer is already gone: the group is unusable either way
        log.info("destroying the process group: %s", exc)
    return True
