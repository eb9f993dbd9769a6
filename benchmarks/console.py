"""Terminal output of the benchmark programs (``python -m benchmarks.NAME``).

What they show goes through here: progress lines to stderr, results (JSON, tables) to stdout so
they can be piped.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def progress(message: str) -> None:
    """One progress line on stderr, flushed at once (benchmarks run for minutes)."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def result_line(message: str) -> None:
    """One line of results on stdout."""
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


def result_json(data: Any) -> None:
    """A benchmark's summary as indented JSON on stdout."""
    result_line(json.dumps(data, indent=2))


def error_line(message: str) -> None:
    """The one-line error a benchmark program exits with."""
    progress(f"stave: error: {message}")
