"""Atomic file writes and early checks that an output path is writable.

Every file stave writes goes through :func:`atomic_write_bytes` / :func:`atomic_write_text`:
the content lands in a temporary file in the same directory and is renamed over the target,
so a reader never sees half a report and a crash never leaves a truncated one.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from stave.errors import OutputError


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temp file in the same directory, fsync, rename)."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise OutputError(f"cannot write {target}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            # mkstemp creates 0600; a report should get the permissions a plain open() would give.
            os.fchmod(handle.fileno(), 0o666 & ~_umask())
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except OSError as exc:
        _remove_quietly(tmp_name)
        raise OutputError(f"cannot write {target}: {exc.strerror or exc}") from exc
    except BaseException:
        _remove_quietly(tmp_name)
        raise
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any, indent: int | None = 2) -> Path:
    """Serialize ``obj`` as JSON (no NaN: non-finite floats must be turned into null first) atomically."""
    return atomic_write_text(path, json.dumps(obj, indent=indent, allow_nan=False) + "\n")


def check_writable(path: str | os.PathLike[str] | None, what: str = "output") -> None:
    """Raise :class:`OutputError` now if ``path`` could not be written later.

    Called before a long run starts, so a typo in ``--json`` does not cost the user the run.
    Creates the parent directory if needed, then probes it with a temporary file.
    """
    if path is None:
        return
    target = Path(path)
    if target.is_dir():
        raise OutputError(f"{what} path {target} is a directory; give a file name")
    directory = target.parent if str(target.parent) else Path(".")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".probe", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(
            f"cannot write {what} to {target}: {exc.strerror or exc}; choose a writable path"
        ) from exc


def _umask() -> int:
    # Read it from /proc where possible: os.umask can only be read by setting it, which would
    # briefly change it for the user's other threads.
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass  # no /proc (not Linux): fall back to setting and restoring it
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _remove_quietly(name: str) -> None:
    try:
        os.unlink(name)
    except FileNotFoundError:
        # Already gone: nothing to clean up.
        return
