"""``stave doctor [OPTIONS] SCRIPT [ARGS...]`` / ``stave doctor [OPTIONS] -m MODULE [ARGS...]``.

Runs the script in this process with the doctor's hooks, then prints the diagnosis and writes the
files asked for. The script's arguments are everything after SCRIPT (or after -m MODULE).
Exit code: the script's own non-zero code first; else 1 when a finding reaches --fail-on; else 0.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Sequence

from stave.cli.common import add_report_options, check_outputs, fails_on
from stave.errors import UsageError

# A progress line at most this often: enough to see a long run is alive, rare enough to cost nothing.
PROGRESS_INTERVAL_S = 10.0


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
    # --- distributed (issue 6): torchrun launch, per-rank records, merge ---
    from stave.cli.doctor_dist import add_dist_options

    add_dist_options(p)
    # --- end distributed ---
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


def add_doctor_options(p: argparse.ArgumentParser) -> None:
    """The doctor's options (shared with ``stave demo``)."""
    p.add_argument("--steps", type=int, metavar="N", help="stop cleanly after N optimizer steps")
    p.add_argument("--warmup", type=int, metavar="N",
                   help="steps left out of the statistics (default 5, fewer for short runs)")
    add_report_options(p)
    p.add_argument("--timeline", metavar="PATH", help="write the step phases as Chrome/Perfetto trace JSON")
    p.add_argument("--flamegraph", metavar="PATH",
                   help="write the main thread's sampled stacks (collapsed format: flamegraph.pl, speedscope)")
    p.add_argument("--profile-steps", type=int, default=0, metavar="N",
                   help="capture a torch.profiler trace of N steps after warm-up and add its analysis")
    p.add_argument("--no-probes", action="store_true",
                   help="skip the short bf16/thread/op-overhead probes run after the script ends")


def misplaced_options(script_args: Sequence[str]) -> list[str]:
    """The doctor's own option names among the script's arguments (``stave doctor train.py --json x``)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_doctor_options(parser)
    known = set(parser._option_string_actions)
    return [tok.split("=", 1)[0] for tok in script_args if tok.split("=", 1)[0] in known]


def _target_from(args: argparse.Namespace) -> Any:
    from stave.capture.runner import Target

    rest = list(args.target)
    if rest and rest[0] == "--":
        rest = rest[1:]
    if args.module:
        return Target(args.module, tuple(rest), module=True)
    if not rest:
        raise UsageError("give a script to run: stave doctor [OPTIONS] SCRIPT [ARGS...] (or -m MODULE)")
    return Target(rest[0], tuple(rest[1:]))


def _validate(args: argparse.Namespace) -> None:
    for name in ("steps", "warmup"):
        value = getattr(args, name)
        if value is not None and value < (1 if name == "steps" else 0):
            raise UsageError(f"--{name} must be {'>= 1' if name == 'steps' else '>= 0'}, got {value}")
    if args.profile_steps < 0:
        raise UsageError(f"--profile-steps must be >= 0, got {args.profile_steps}")


def run(args: argparse.Namespace) -> int:
    """Run the doctor for parsed arguments; returns the exit code."""
    # --- distributed (issue 6): --nproc-per-node, --merge, or running as one rank of a launch ---
    from stave.cli.doctor_dist import dist_mode, run_distributed

    mode = dist_mode(args)
    if mode is not None:
        return run_distributed(args, mode)
    # --- end distributed ---
    _validate(args)
    target = _target_from(args)
    target.check()
    check_outputs((args.json, "--json"), (args.html, "--html"), (args.timeline, "--timeline"),
                  (args.flamegraph, "--flamegraph"))
    return run_doctor(target, args)


def run_doctor(target: Any, args: argparse.Namespace) -> int:
    """Measure ``target``, diagnose, render and write; returns the exit code."""
    from rich.console import Console
    from rich.markup import escape

    from stave.capture.runner import run_target
    from stave.capture.session import DoctorOptions, DoctorSession, StopRun
    from stave.doctor.diagnosis import diagnose_records
    from stave.measure.record import RunInfo
    from stave.report.show import show_and_write

    err = Console(stderr=True)
    quiet = bool(args.quiet)
    options = DoctorOptions(
        steps=args.steps,
        warmup=args.warmup,
        profile_steps=args.profile_steps,
        probes=not args.no_probes,
    )
    run_info = RunInfo(script=target.name, args=list(target.args), module=target.module)
    progress = _Progress(err) if not quiet else None
    session = DoctorSession(options, run_info, on_step=progress)
    if not quiet:
        # The script's name and arguments are the user's: escaped, so "[/x]" or "[red]" print as typed.
        command = escape(f"{target.name} {' '.join(target.args)}".rstrip())
        err.print(f"[bold]stave doctor[/]: running {command}", highlight=False, soft_wrap=True)
    session.start()
    try:
        outcome = run_target(target, StopRun)
    finally:
        # Whatever happened in the script, what was measured is kept (and Ctrl-C during the
        # wrap-up still leaves hooks removed and workers stopped).
        record = session.stop()
    record.run.script_exit_code = outcome.exit_code
    record.run.stopped_by = outcome.stopped_by
    record.run.error = outcome.error
    if not quiet:
        err.print(f"stave doctor: script ended ({_ending(outcome)}); analyzing {len(record.steps)} steps", highlight=False,
                  soft_wrap=True)
        misplaced = misplaced_options(target.args) if outcome.exit_code == 2 else []
        if misplaced:
            # Exit code 2 is argparse's "unrecognized arguments": most likely the doctor's own
            # options were written after the script, where they belong to the script.
            err.print(escape(f"stave doctor: {', '.join(misplaced)} went to the script; the doctor's options go "
                             f"before it: stave doctor {misplaced[0]} ... {target.name}"), highlight=False, soft_wrap=True)
    result = diagnose_records([record])
    if session.profile_trace_path:
        _fold_trace(result, session.profile_trace_path)
        if not quiet:
            err.print(f"stave doctor: profiler trace of {args.profile_steps} steps kept at {escape(session.profile_trace_path)} "
                      "(ui.perfetto.dev, or stave trace PATH)", highlight=False, soft_wrap=True)
    show_and_write(result, json_path=args.json, html_path=args.html, timeline_path=args.timeline,
                   flamegraph_path=args.flamegraph, quiet=quiet)
    if outcome.exit_code != 0:
        return outcome.exit_code
    return 1 if fails_on(result.findings, args.fail_on) else 0


def _ending(outcome: Any) -> str:
    return {
        "steps": "--steps reached",
        "end": "finished",
        "exit": f"exit code {outcome.exit_code}",
        "error": f"failed with exit code {outcome.exit_code}",
        "interrupt": "interrupted",
    }.get(outcome.stopped_by, outcome.stopped_by)


def _fold_trace(result: Any, trace_path: str) -> None:
    """Add the analysis of the trace captured with --profile-steps to the doctor's result."""
    from stave.diagnose.finding import rank_findings
    from stave.doctor import trace_fold as doctor_fold

    analysis, findings = doctor_fold.analyze_for_doctor(trace_path)
    result.trace = analysis
    known = {f.id for f in result.findings}
    result.findings = rank_findings(result.findings + [f for f in findings if f.id not in known])


class _Progress:
    """Prints a progress line on stderr at most every PROGRESS_INTERVAL_S (called at each step end)."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.last = time.monotonic()

    def __call__(self, index: int, session: Any) -> None:
        now = time.monotonic()
        if now - self.last < PROGRESS_INTERVAL_S:
            return
        self.last = now
        recent = session.tracker.steps[-20:]
        if recent:
            durations = sorted(s.duration_ns for s in recent)
            median_s = durations[len(durations) // 2] / 1e9
            self.console.print(f"stave doctor: step {index + 1}, {median_s * 1e3:.1f} ms/step", highlight=False)
        sys.stderr.flush()
