"""``stave doctor --verify``: the options, the warning, and the progress bar around :func:`stave.doctor.verify.verify`."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from stave.capture.runner import Target
from stave.doctor.result import DoctorResult
from stave.doctor.verification import WRITES_WARNING, Verification
from stave.doctor.verify import DEFAULT_PAIRS, DEFAULT_RUN_STEPS, DEFAULT_RUN_WARMUP, VerifyEvents, VerifyOptions, verify
from stave.errors import UsageError

# A verification run is stopped past this multiple of the doctor's own run (and at least the floor):
# it runs at most as many steps, so a run that takes far longer is hung.
RUN_TIMEOUT_FACTOR = 5.0
RUN_TIMEOUT_FLOOR_S = 120.0


def verify_options(args: argparse.Namespace, doctor_wall_s: float) -> VerifyOptions:
    """The verification's options from the command line (one-line UsageError when they do not fit)."""
    steps = args.verify_steps or args.steps or DEFAULT_RUN_STEPS
    warmup = args.warmup if args.warmup is not None else min(DEFAULT_RUN_WARMUP, max(0, steps - 3))
    if steps < warmup + 3:
        raise UsageError(f"--verify needs at least 3 steps past the warm-up: {steps} steps with --warmup {warmup}")
    timeout_s = max(RUN_TIMEOUT_FLOOR_S, RUN_TIMEOUT_FACTOR * doctor_wall_s)
    return VerifyOptions(top=args.verify_top or 3, pairs=args.verify_pairs or DEFAULT_PAIRS, steps=steps,
                         warmup=warmup, timeout_s=timeout_s, allow_learning_changes=args.allow_learning_changes)


class _ProgressEvents(VerifyEvents):
    """Shows the runs on a rich progress bar (stderr)."""

    def __init__(self, progress: Progress | None, console: Console) -> None:
        self.progress = progress
        self.console = console
        self.task: Any = None

    def planned(self, total_runs: int) -> None:
        if self.progress is not None:
            self.task = self.progress.add_task("verify", total=max(1, total_runs), what="starting")

    def run_started(self, finding_id: str, label: str) -> None:
        if self.progress is not None:
            self.progress.update(self.task, what=f"{finding_id}: {label}")

    def run_done(self, finding_id: str, result: Any) -> None:
        if self.progress is not None:
            self.progress.advance(self.task)

    def skipped_runs(self, count: int) -> None:
        if self.progress is not None and count > 0:
            self.progress.update(self.task, total=self.progress.tasks[0].total - count)

    def finished(self, item: Any) -> None:
        measured = f"{item.measured_speedup:.2f}x measured" if item.measured_speedup is not None else item.status
        self.console.print(escape(f"stave doctor --verify: {item.finding_id}: {measured} (estimated {item.est_speedup:.2f}x)"),
                           highlight=False, soft_wrap=True)


def run_verify(result: DoctorResult, target: Target, args: argparse.Namespace, err: Console) -> Verification:
    """Verify the top findings of ``result``, with progress on ``err`` unless --quiet."""
    options = verify_options(args, result.record.run.wall_ns / 1e9 if result.record.run.wall_ns else 0.0)
    quiet = bool(args.quiet)
    if not quiet:
        err.print(f"[yellow]stave doctor: warning:[/] {escape(WRITES_WARNING)}", highlight=False, soft_wrap=True)
    if quiet:
        return verify(result.findings, target, options)
    columns = (TextColumn("verify"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.fields[what]}"))
    with Progress(*columns, console=err, transient=True) as progress:
        return verify(result.findings, target, options, events=_ProgressEvents(progress, err))
