"""``stave trace [--json PATH] [--html PATH] [--fail-on SEVERITY] TRACE_OR_DIR...``.

Analyses torch.profiler traces (``.json`` / ``.json.gz``, one file per rank or directories of them)
and prints the step breakdown, GPU and rank analysis and ranked findings. Exit codes: 0 ok, 1 a
finding at or above ``--fail-on``, 2 bad input (one line naming the file and where it broke).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from stave.cli.common import add_report_options, check_outputs, fails_on


def register(sub: Any) -> None:
    """Add the ``trace`` subcommand."""
    p = sub.add_parser(
        "trace",
        help="analyse torch.profiler traces (one or many ranks)",
        description="Analyse torch.profiler (Kineto) traces: per-step breakdown, GPU use, ranks, findings.",
    )
    p.add_argument("paths", nargs="+", metavar="TRACE_OR_DIR",
                   help="trace files (.json, .json.gz) or directories of them (one file per rank)")
    add_report_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Analyse, render, write; returns the exit code."""
    from rich.console import Console
    from rich.markup import escape

    from stave.files import atomic_write_json, atomic_write_text
    from stave.diagnose.trace_report import analyze_paths

    check_outputs((args.json, "--json"), (args.html, "--html"))
    err = Console(stderr=True)
    show_progress = not args.quiet and err.is_terminal

    def progress(i: int, n: int, path: Path) -> None:
        if show_progress:
            err.print(f"[dim]stave trace: reading {escape(str(path))} ({i + 1}/{n})[/]", highlight=False, soft_wrap=True)

    report = analyze_paths(args.paths, progress=progress)
    for skipped in report.skipped:
        print(f"stave: warning: skipped {skipped.path}: {skipped.reason}", file=sys.stderr)
    if not args.quiet:
        from stave.report.trace_terminal import render_trace

        render_trace(report, Console())
    if args.json:
        from stave.report.trace_json import trace_json

        atomic_write_json(args.json, trace_json(report))
    if args.html:
        from stave.report.trace_html import trace_html

        atomic_write_text(args.html, trace_html(report))
    return 1 if fails_on(report.findings, args.fail_on) else 0
