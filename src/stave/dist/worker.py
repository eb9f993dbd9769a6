"""One rank's doctor run: the ordinary doctor session, recording into the run directory.

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
import os
import signal
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Iterator

from stave.capture.runner import Outcome, Target, run_target
from stave.capture.session import DoctorOptions, DoctorSession, StopRun
from stave.dist import rundir
from stave.dist.env import DistEnv
from stave.dist.hooks import DistHooks
from stave.measure.record import RunInfo, RunRecord

log = logging.getLogger(__name__)

# torchrun waits 30 s after its SIGTERM before it kills; a rank rewrites its record at least this
# often (seconds), so even a rank killed outright has lost at most this much of its measurements.
DEFAULT_RECORD_INTERVAL_S = 10.0


@dataclass
class RankRun:
    """How one rank's run went."""

    record: RunRecord
    outcome: Outcome
    record_path: Path
    terminated: bool = False


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


def run_rank(
    target: Target,
    env: DistEnv,
    run_dir: Path,
    steps: int | None = None,
    warmup: int | None = None,
    probes: bool = True,
    record_interval_s: float = DEFAULT_RECORD_INTERVAL_S,
    on_step: Callable[[int, Any], None] | None = None,
) -> RankRun:
    """Run ``target`` as rank ``env.rank`` under the doctor; the final record is in ``run_dir``."""
    path = rundir.record_path(run_dir, env.rank)
    options = DoctorOptions(
        steps=steps,
        warmup=warmup,
        # The probes measure the machine; one rank per node runs them after the script, when the
        # node's other ranks are idle, so they do not disturb each other.
        probes=probes and env.local_rank == 0,
        record_path=str(path),
        record_interval_s=record_interval_s,
    )
    run_info = RunInfo(
        script=target.name,
        args=list(target.args),
        module=target.module,
        rank=env.rank,
        local_rank=env.local_rank,
        world_size=env.world_size,
        # Known now, so even the first periodic record says who and where this rank is.
        hostname=socket.gethostname(),
        pid=os.getpid(),
    )
    hooks = DistHooks(env, record_interval_s)
    session = DoctorSession(options, run_info, on_step=on_step, attachments=[hooks])
    outcome = Outcome(1, "error", "the doctor stopped before the script ran")
    with sigterm_interrupts() as sigterm:
        session.start()
        try:
            outcome = run_target(target, StopRun)
        finally:
            sigterm.armed = False
            shutdown_process_group()
            # The outcome goes into the run info before stop(), which writes the final record.
            session.run.script_exit_code = outcome.exit_code
            session.run.stopped_by = outcome.stopped_by
            session.run.error = outcome.error
            if sigterm.fired and outcome.stopped_by == "interrupt":
                session.run.error = "terminated by SIGTERM (the launcher stops the other ranks when one fails)"
            record = session.stop()
    return RankRun(record, outcome, path, terminated=sigterm.fired)
