"""Errors that the CLI turns into one clear line and exit code 2.

Library code raises these for problems with the user's input (a missing file, a malformed trace,
a truncated shard); anything else is a bug in stave and is reported as such.
"""

from __future__ import annotations


class StaveError(Exception):
    """Base class: a problem the user can fix. ``str(err)`` is the one line the CLI prints."""

    exit_code = 2


class UsageError(StaveError):
    """Bad command-line usage: unknown option, missing argument, conflicting options."""


class InputError(StaveError):
    """A file or directory the user gave is missing, unreadable or malformed."""


class OutputError(StaveError):
    """An output path cannot be written (checked before any long work starts)."""


class FormatError(InputError):
    """A file from someone else (trace, packed dataset) does not follow its format.

    The message names the file and, where known, the byte offset or record where it broke.
    """
