"""What ``stave doctor`` and its distributed modes share: the doctor's options, the target, their
checks, and the progress line (``stave demo`` takes the same options).

Kept apart from :mod:`stave.cli.doctor` so the single-process and the distributed command
(:mod:`stave.cli.doctor_dist`) both import it and neither imports the other's insides.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Sequence

from stave.capture.runner import Target
from stave.cli.common import add_report_options
from stave.errors import UsageError
from stave.measure.steps import step_time_s

# A progress line at most this often: enough to see a long run is alive, rare enough to cost nothing.
PROGRESS_INTERVAL_S = 10.0
# The progress line's step time is over this many of the latest steps.
PROGRESS_RECENT_STEPS = 20


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


def add_verify_options(p: argparse.ArgumentParser) -> None:
    """``stave doctor --verify`` and its settings (docs/doctor.md, "Verifying the top findings")."""
    p.add_argument("--verify", action="store_true",
                   help="after the diagnosis, run the script again with each of the top 3 findings' fixes "
                        "injected (baseline and fixed interleaved) and report the measured speedup")
    p.add_argument("--verify-top", type=int, metavar="N", help="verify the top N findings about the job (implies --verify)")
    p.add_argument("--verify-pairs", type=int, metavar="N",
                   help="measured baseline/fixed pairs per finding, after a warm-up pair (default 3)")
    p.add_argument("--verify-steps", type=int, metavar="N",
                   help="optimizer steps per verification run (default: --steps, else 30)")
    p.add_argument("--allow-learning-changes", action="store_true",
                   help="let --verify inject fixes that change what is learned per step (batch size, learning rate)")


def validate_verify(args: argparse.Namespace) -> None:
    """Exit 2 with one line for bad --verify-* values (``args.verify`` is set when --verify-top is given)."""
    for name in ("verify_top", "verify_pairs", "verify_steps"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if getattr(args, "verify_top", None) is not None:
        args.verify = True
    given = [f"--{n.replace('_', '-')}" for n in ("verify_pairs", "verify_steps") if getattr(args, n, None) is not None]
    if getattr(args, "allow_learning_changes", False):
        given.append("--allow-learning-changes")
    if given and not getattr(args, "verify", False):
        raise UsageError(f"{', '.join(given)} only mean something with --verify")


def misplaced_options(script_args: Sequence[str]) -> list[str]:
    """The doctor's own option names among the script's arguments (``stave doctor train.py --json x``)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_doctor_options(parser)
    add_verify_options(parser)
    known = set(parser._option_string_actions)
    return [tok.split("=", 1)[0] for tok in script_args if tok.split("=", 1)[0] in known]


def target_from(args: argparse.Namespace) -> Target:
    """The script (or ``-m`` module) and its arguments, from the parsed command line."""
    rest = list(args.target)
    if rest and rest[0] == "--":
        rest = rest[1:]
    if args.module:
        return Target(args.module, tuple(rest), module=True)
    if not rest:
        raise UsageError("give a script to run: stave doctor [OPTIONS] SCRIPT [ARGS...] (or -m MODULE)")
    return Target(rest[0], tuple(rest[1:]))


def validate(args: argparse.Namespace) -> None:
    """Exit 2 with one line for a bad --steps / --warmup / --profile-steps."""
    for name in ("steps", "warmup"):
        value = getattr(args, name)
        if value is not None and value < (1 if name == "steps" else 0):
            raise UsageError(f"--{name} must be {'>= 1' if name == 'steps' else '>= 0'}, got {value}")
    if args.profile_steps < 0:
        raise UsageError(f"--profile-steps must be >= 0, got {args.profile_steps}")


def doctor_options(args: argparse.Namespace, **extra: Any) -> Any:
    """The facade's validated :class:`~stave.capture.session.DoctorOptions` from the parsed command
    line (``extra``: per-mode settings)."""
    from stave.capture.session import DoctorOptions  # brings torch: only when a run starts

    return DoctorOptions(steps=args.steps, warmup=args.warmup, profile_steps=args.profile_steps,
                         probes=not args.no_probes, **extra)


class Progress:
    """Prints a progress line on stderr at most every PROGRESS_INTERVAL_S (called at each step end)."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.last = time.monotonic()

    def __call__(self, index: int, session: Any) -> None:
        now = time.monotonic()
        if now - self.last < PROGRESS_INTERVAL_S:
            return
        self.last = now
        recent = session.tracker.steps[-PROGRESS_RECENT_STEPS:]
        if recent:
            step_s = step_time_s(s.duration_ns / 1e9 for s in recent)
            self.console.print(f"stave doctor: step {index + 1}, {step_s * 1e3:.1f} ms/step", highlight=False)
        sys.stderr.flush()
