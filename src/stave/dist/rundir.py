"""The run directory of a distributed doctor run: one record file per rank, read back safely.

Layout (docs/distributed.md)::

    DIR/rank-00000.json    rank 0's record (stave.record/1), rewritten atomically while it runs
    DIR/rank-00001.json    ...

Every rank writes only its own file, so the directory can sit on storage shared by several nodes
without locks. Files are read as untrusted input: size-bounded, JSON only, every field type-checked.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from stave.dist.env import DistEnv, safe_name
from stave.errors import FormatError, InputError, OutputError
from stave.files import check_writable
from stave.measure.record import RunRecord

log = logging.getLogger(__name__)

# Where ranks write when no --run-dir is given: ./stave-dist/<run id>.
DEFAULT_PARENT = "stave-dist"
RECORD_PATTERN = re.compile(r"^rank-(\d{1,9})\.json$")
# A day-long run's record (steps, 10 Hz machine samples) is a few hundred MB; a bigger file is not
# one of ours, and reading it whole could exhaust memory.
MAX_RECORD_BYTES = 1 << 30


def record_path(run_dir: str | os.PathLike[str], rank: int) -> Path:
    """The record file of ``rank``."""
    return Path(run_dir) / f"rank-{rank:05d}.json"


def default_run_dir(env: DistEnv | None = None, run_id: str | None = None) -> Path:
    """``./stave-dist/<run id>``: the same path on every rank of one launch without talking."""
    rid = run_id if run_id is not None else (env.run_id if env is not None else "run")
    return Path(DEFAULT_PARENT) / safe_name(rid)


def new_run_id() -> str:
    """A fresh id for a launch stave starts itself (time and pid: unique on one machine)."""
    return time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"


def prepare(run_dir: str | os.PathLike[str]) -> Path:
    """Create the run directory and check it can be written (OutputError, exit 2, if not)."""
    path = Path(run_dir)
    if path.exists() and not path.is_dir():
        raise OutputError(f"run directory {path} is a file; give a directory (--run-dir DIR)")
    check_writable(path / "rank-probe.json", "the run directory")
    return path


def clear_records(run_dir: str | os.PathLike[str]) -> int:
    """Remove old rank records from ``run_dir`` (a single-node launch owns its directory); returns the count."""
    removed = 0
    for entry in _record_files(Path(run_dir)):
        try:
            entry.unlink()
            removed += 1
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise OutputError(f"cannot remove the old record {entry}: {exc.strerror or exc}") from exc
    return removed


@dataclass
class RankFile:
    """One rank's record as found on disk."""

    rank: int
    path: Path
    record: RunRecord
    mtime: float


@dataclass
class DirScan:
    """What a run directory holds: the readable records, and one line per file that was not."""

    files: list[RankFile] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _record_files(run_dir: Path) -> list[Path]:
    try:
        names = sorted(os.listdir(run_dir))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise InputError(f"cannot list the run directory {run_dir}: {exc.strerror or exc}") from exc
    return [run_dir / n for n in names if RECORD_PATTERN.match(n)]


def read_record(path: Path) -> RunRecord:
    """Read one rank's record; FormatError/InputError name the file and what is wrong."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if size > MAX_RECORD_BYTES:
        raise FormatError(f"{path}: {size} bytes is larger than any stave record ({MAX_RECORD_BYTES} max)")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise FormatError(f"{path}: not valid JSON ({exc})") from exc
    except RecursionError as exc:
        raise FormatError(f"{path}: JSON nested too deeply to be a stave record") from exc
    return RunRecord.from_dict(data, where=str(path))


def scan(run_dir: str | os.PathLike[str]) -> DirScan:
    """Read every ``rank-N.json`` of ``run_dir``; unreadable files become problems, not errors."""
    path = Path(run_dir)
    if not path.is_dir():
        raise InputError(f"run directory not found: {path} (give the --run-dir the ranks wrote to)")
    out = DirScan()
    for file in _record_files(path):
        match = RECORD_PATTERN.match(file.name)
        assert match is not None
        rank = int(match.group(1))
        try:
            mtime = file.stat().st_mtime
            record = read_record(file)
        except FileNotFoundError:
            continue  # replaced between listing and reading: the next scan sees the new file
        except (FormatError, InputError) as exc:
            out.problems.append(f"rank {rank}: record unreadable: {exc}")
            continue
        if record.run.rank != rank:
            out.problems.append(f"{file.name} holds rank {record.run.rank}'s record; it was ignored")
            continue
        out.files.append(RankFile(rank, file, record, mtime))
    return out
