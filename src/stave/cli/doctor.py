"""``stave doctor [OPTIONS] SCRIPT [ARGS...]`` / ``stave doctor [OPTIONS] -m MODULE [ARGS...]``.

Runs the script in this process with the doctor's hooks, then prints the diagnosis and writes the
files asked for. The script's arguments are everything after SCRIPT (or after -m MODULE).
Exit code: the script's own non-zero code first; else 1 when a finding reaches --fail-on; else 0.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.markup import escape

from stave.capture.runner import EXIT_INTERRUPTED, Outcome, Target
from stave.cli.common import check_outputs, fails_on
from stave.cli.doctor_args import (Progress, add_doctor_options, add_verify_options, doctor_options, misplaced_options,
                                   target_from, validate, validate_verify)
from stave.cli.doctor_dist import add_dist_options, dist_mode, run_distributed
from stave.errors import UsageError

__all__ = ["add_doctor_options", "register", "run", "run_doctor", "split_target"]


def register(sub: Any) -> None:
    """Add the ``doctor`` subcommand."""
    p = sub.add_parser(
        "doctor",
        help="run a training script under the doctor and diagnose it",
        description="Run an unmodified PyTorch training script, measure every step and the machine, "
        "and print ranked findings with evidence, estimated speedup and the fix.",
        usage="stave doctor [OPTIONS] SCRIPT [ARGS...] | stave doctor [OPTIONS] -m MODULE [ARGS...]",
    )
    add_doctor_options(p)
    add_verify_options(p)
    add_dist_options(p)
    p.add_argument("-m", dest="module", metavar="MODULE", help="run a module (like python -m MODULE)")
    p.add_argument("target", nargs=argparse.REMAINDER, help="the script and its arguments")
    p.set_defaults(func=run, split_target=split_target)


def split_target(parser: argparse.ArgumentParser, tokens: list[str]) -> tuple[list[str], list[str]]:
    """Split the tokens after ``doctor`` into the doctor's own and the script's.

    Everything from the script (the first positional) or from ``-m MODULE`` on belongs to the
    script, as with ``python`` and ``torchrun``: ``stave doctor --steps 5 train.py --steps 100``
    gives the doctor 5 steps and the script ``--steps 100``.
    """
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "--":
            return tokens[:i], tokens[i + 1:]
        if tok == "-m":
            return tokens[: i + 2], tokens[i + 2:]
        if not tok.startswith("-") or tok == "-":
            return tokens[:i], tokens[i:]
        action = parser._option_string_actions.get(tok.split("=", 1)[0])
        takes_value = action is not None and action.nargs != 0 and "=" not in tok
        i += 2 if takes_value else 1
    return tokens, []


def run(args: argparse.Namespace) -> int:
    """Run the doctor for parsed arguments; returns the exit code."""
    # --nproc-per-node, --merge, or running as one rank of a launch (docs/distributed.md).
    validate_verify(args)
    mode = dist_mode(args)
    if mode is not None:
        if args.verify:
            raise UsageError("--verify runs single-process scripts only (not with a distributed launch or merge)")
        return run_distributed(args, mode)
    validate(args)
    target = target_from(args)
    target.check()
    check_outputs((args.json, "--json"), (args.html, "--html"), (args.timeline, "--timeline"),
                  (args.flamegraph, "--flamegraph"))
    return run_doctor(target, args)


def run_doctor(target: Target, args: argparse.Namespace) -> int:
    """Measure and diagnose ``target`` through the doctor facade, render and write; returns the exit code."""
    # Imported here, not at the top: they bring torch, and `stave --help` should not pay for it.
    from stave.doctor.facade import Doctor, run_info_for
    from stave.report.show import show_and_write

    err = Console(stderr=True)
    quiet = bool(args.quiet)
    doctor = Doctor(doctor_options(args), run_info_for(target), on_step=Progress(err) if not quiet else None)
    if not quiet:
        # The script's name and arguments are the user's: escaped, so "[/x]" or "[red]" print as typed.
        command = escape(f"{target.name} {' '.join(target.args)}".rstrip())
        err.print(f"[bold]stave doctor[/]: running {command}", highlight=False, soft_wrap=True)
    outcome = doctor.run(target)
    assert doctor.record is not None
    if not quiet:
        err.print(f"stave doctor: script ended ({_ending(outcome)}); analyzing {len(doctor.record.steps)} steps",
                  highlight=False, soft_wrap=True)
        misplaced = misplaced_options(target.args) if outcome.exit_code == 2 else []
        if misplaced:
            # Exit code 2 is argparse's "unrecognized arguments": most likely the doctor's own
            # options were written after the script, where they belong to the script.
            err.print(escape(f"stave doctor: {', '.join(misplaced)} went to the script; the doctor's options go "
                             f"before it: stave doctor {misplaced[0]} ... {target.name}"), highlight=False, soft_wrap=True)
    result = doctor.result()
    if doctor.profile_trace_path and not quiet:
        err.print(f"stave doctor: profiler trace of {args.profile_steps} steps kept at {escape(doctor.profile_trace_path)} "
                  "(ui.perfetto.dev, or stave trace PATH)", highlight=False, soft_wrap=True)
    interrupted = False
    if getattr(args, "verify", False):
        if outcome.exit_code != 0 or outcome.stopped_by == "interrupt":
            # Nothing to compare against: a baseline that fails or was stopped would fail again.
            err.print(f"stave doctor: --verify skipped: the script {_ending(outcome)}", highlight=False)
        else:
            from stave.cli.doctor_verify import run_verify

            result.verification = run_verify(result, target, args, err)
            interrupted = result.verification.interrupted
    show_and_write(result, json_path=args.json, html_path=args.html, timeline_path=args.timeline,
                   flamegraph_path=args.flamegraph, quiet=quiet)
    if outcome.exit_code != 0:
        return outcome.exit_code
    if interrupted:
        return EXIT_INTERRUPTED
    return 1 if fails_on(result.findings, args.fail_on) else 0


def _ending(outcome: Outcome) -> str:
    return {
        "steps": "--steps reached",
        "end": "finished",
        "exit": f"exit code {outcome.exit_code}",
        "error": f"failed with exit code {outcome.exit_code}",
        "interrupt": "interrupted",
    }.get(outcome.stopped_by, outcome.stopped_by)
