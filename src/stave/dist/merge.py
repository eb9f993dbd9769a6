"""Collect the ranks' records of a run directory (the doctor diagnoses them: :func:`stave.doctor.facade.merged_result`).

A rank's status comes from its record: the script's ending when the rank wrote its final record
("ok", "crashed", "interrupted"), else "killed" when its process is gone (same host: the pid is
not running; another host: the record stopped being rewritten) or "running" while it is still
going. A rank with no record at all is "missing". Every rank that left a record is merged, with
what it had measured.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil

from stave.dist import rundir
from stave.dist.worker import DEFAULT_RECORD_INTERVAL_S
from stave.errors import InputError
from stave.measure.ranks import rank_status
from stave.measure.record import RunRecord

log = logging.getLogger(__name__)

# A rank on another host counts as gone when its record has not been rewritten for this many
# record intervals plus the grace below: one missed rewrite is a slow disk, three are a dead rank.
STALE_INTERVALS = 3
# Shared file systems (NFS) report modification times with a few seconds' lag and clock skew.
STALE_GRACE_S = 30.0
# How often a waiting merge looks at the directory again.
POLL_S = 0.5

KILLED_ERROR = ("the process ended without writing its final record (SIGKILL, the OOM killer, "
                "or a lost node); the report shows what it had written before")


@dataclass
class Collected:
    """The records of one launch, with each rank's status."""

    records: list[RunRecord]
    statuses: list[str]
    world_size: int
    missing: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """True when every rank has ended (with a final record or known dead) and none is missing."""
        return not self.missing and "running" not in self.statuses


def _pid_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False


def classify(file: rundir.RankFile, now: float, hostname: str, pid_alive: Callable[[int], bool] = _pid_alive) -> str:
    """The status of one rank from its record file (see the module docstring)."""
    record = file.record
    if record.run.stopped_by != "running":
        return rank_status(record)
    if record.run.hostname == hostname and record.run.pid > 0:
        return "running" if pid_alive(record.run.pid) else "killed"
    interval = record.dist.record_interval_s or DEFAULT_RECORD_INTERVAL_S
    return "killed" if now - file.mtime > STALE_INTERVALS * interval + STALE_GRACE_S else "running"


def select_launch(files: list[rundir.RankFile]) -> tuple[list[rundir.RankFile], list[str]]:
    """Keep the records of the most recent launch in the directory; note the others."""
    groups: dict[str, list[rundir.RankFile]] = {}
    for f in files:
        groups.setdefault(f.record.dist.run_id, []).append(f)
    if len(groups) <= 1:
        return files, []
    latest = max(groups, key=lambda k: max(f.record.run.started_at for f in groups[k]))
    notes = [
        f"ignored {len(fs)} record(s) of an earlier run (run id {rid or '?'}) in the same directory"
        for rid, fs in groups.items() if rid != latest
    ]
    return groups[latest], notes


def collect_once(run_dir: str | Path, hostname: str | None = None,
                 pid_alive: Callable[[int], bool] = _pid_alive) -> Collected:
    """Read the directory now and classify every rank."""
    scan = rundir.scan(run_dir)
    files, notes = select_launch(scan.files)
    notes = scan.problems + notes
    if not files:
        detail = f" ({'; '.join(scan.problems)})" if scan.problems else ""
        raise InputError(f"no rank records in {run_dir}{detail}; give the --run-dir the ranks wrote to")
    host = hostname if hostname is not None else socket.gethostname()
    now = time.time()
    world = max(max(f.record.run.world_size, f.record.dist.world_size) for f in files)
    notes += [f"ignored rank {f.rank}'s record: outside the world size {world}" for f in files if f.rank >= world]
    # Sorted by rank: diagnose_records pairs records with statuses in rank order.
    files = sorted((f for f in files if f.rank < world), key=lambda f: f.rank)
    statuses = [classify(f, now, host, pid_alive) for f in files]
    present = {f.rank for f in files}
    missing = [r for r in range(world) if r not in present]
    return Collected([f.record for f in files], statuses, world, missing, notes)


def collect(run_dir: str | Path, wait_s: float = 0.0, hostname: str | None = None,
            pid_alive: Callable[[int], bool] = _pid_alive) -> Collected:
    """Read the directory, waiting up to ``wait_s`` for ranks still running or not there yet."""
    deadline = time.monotonic() + max(0.0, wait_s)
    while True:
        got = collect_once(run_dir, hostname, pid_alive)
        if got.complete or time.monotonic() >= deadline:
            break
        time.sleep(POLL_S)
    for record, status in zip(got.records, got.statuses):
        if status == "killed":
            record.run.stopped_by = "killed"
            record.run.error = record.run.error or KILLED_ERROR
    if got.missing:
        got.notes.append(
            f"rank(s) {', '.join(map(str, got.missing))} of {got.world_size} left no record: they failed before "
            "the doctor started in them, or their node never joined"
        )
    running = [r.run.rank for r, s in zip(got.records, got.statuses) if s == "running"]
    if running:
        got.notes.append(f"rank(s) {', '.join(map(str, running))} were still running: their measurements so far "
                         "are included; merge again when they end (stave doctor --merge DIR)")
    return got

