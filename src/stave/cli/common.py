"""Options and helpers shared by subcommands (--json/--html/--fail-on, exit-code policy)."""

from __future__ import annotations

import argparse
from typing import Iterable

from stave.diagnose.finding import SEVERITIES, Finding
from stave.files import check_writable


def add_report_options(parser: argparse.ArgumentParser) -> None:
    """--json, --html, --fail-on and --quiet, as every analysing subcommand takes them."""
    parser.add_argument("--json", metavar="PATH", help="write the report as JSON (versioned schema)")
    parser.add_argument("--html", metavar="PATH", help="write a self-contained HTML report")
    parser.add_argument(
        "--fail-on",
        choices=SEVERITIES,
        default=None,
        help="exit 1 if a finding of this severity or worse exists",
    )
    parser.add_argument("--quiet", action="store_true", help="no terminal report, only the files asked for")


def check_outputs(*paths_and_names: tuple[str | None, str]) -> None:
    """Fail with exit 2 before any work if an output path cannot be written."""
    for path, name in paths_and_names:
        check_writable(path, name)


def fails_on(findings: Iterable[Finding], threshold: str | None) -> bool:
    """True when a finding at or above ``threshold`` severity exists."""
    if threshold is None:
        return False
    floor = SEVERITIES.index(threshold)
    return any(SEVERITIES.index(f.severity) >= floor for f in findings)
