"""One distributed rank's doctor run: the ordinary doctor (:class:`~stave.doctor.facade.Doctor`),
recording into the run directory.

Each rank runs the user's script in-process under the doctor with :class:`~stave.dist.hooks.DistHooks`
attached; the session rewrites the rank's record atomically every ``record_interval_s`` (and once
at start), so a rank killed at any point leaves what it had measured. Rank 0 (or ``--merge``) then
diagnoses all records with :func:`stave.doctor.facade.merged_result`.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from stave.capture.runner import Outcome, Target, run_target
from stave.capture.session import DoctorOptions, StopRun
from stave.dist import rundir
from stave.dist.env import DistEnv
from stave.dist.hooks import DistHooks
from stave.dist.worker import DEFAULT_RECORD_INTERVAL_S, shutdown_process_group, sigterm_interrupts
from stave.doctor.facade import Doctor
from stave.measure.record import RunInfo, RunRecord


@dataclass
class RankRun:
    """How one rank's run went."""

    record: RunRecord
    outcome: Outcome
    record_path: Path
    terminated: bool = False


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
    doctor = Doctor(options, run_info, on_step=on_step, attachments=[DistHooks(env, record_interval_s)])
    outcome = Outcome(1, "error", "the doctor stopped before the script ran")
    with sigterm_interrupts() as sigterm:
        doctor.start()
        try:
            outcome = run_target(target, StopRun)
        finally:
            sigterm.armed = False
            shutdown_process_group()
            if sigterm.fired and outcome.stopped_by == "interrupt":
                outcome = Outcome(outcome.exit_code, outcome.stopped_by,
                                  "terminated by SIGTERM (the launcher stops the other ranks when one fails)")
            # The outcome goes into the run info in stop(), before it writes the final record.
            record = doctor.stop(outcome)
    return RankRun(record, outcome, path, terminated=sigterm.fired)
