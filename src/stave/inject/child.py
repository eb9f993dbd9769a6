"""The child process: run the user's script with a selection of fixes and write what the probe saw.

``python -m stave.inject.child --out RESULT.json --fixes JSON [--steps N] [--loss-steps K]
[--seed S] [--perturb-bf16] [-m] -- SCRIPT [ARGS...]``. The result file (written atomically, also
when the script fails or is interrupted) holds the fixes' report, the probe's measurements and how
the script ended. The parent side is :mod:`stave.inject.launch`. Library code: it logs, it does not print.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import time
from typing import Any, Sequence

import torch

from stave.capture.runner import Target, leave_if_hard_exit, run_target
from stave.errors import StaveError
from stave.files import atomic_write_json
from stave.inject.apply import install
from stave.inject.machine import this_machine
from stave.inject.perturb import round_weights_to_bf16
from stave.inject.probe import StepProbe, StopProbe
from stave.inject.selection import parse_selection

log = logging.getLogger(__name__)

# Losses compared by the loss check: the first steps, before the chaotic divergence any change of
# summation order starts has grown (the ladder's check compares as many: stave.bench.losscheck).
DEFAULT_LOSS_STEPS = 4
RESULT_VERSION = 1


def seed_everything(seed: int) -> None:
    """The same seeds in every run: Python's, torch's and numpy's global generators."""
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np
    except ImportError:  # numpy is optional for the user's script
        return
    np.random.seed(seed % 2**32)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The child's command line."""
    p = argparse.ArgumentParser(prog="python -m stave.inject.child")
    p.add_argument("--out", required=True)
    p.add_argument("--fixes", default='{"fixes": []}')
    p.add_argument("--steps", type=int)
    p.add_argument("--loss-steps", type=int, default=DEFAULT_LOSS_STEPS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--perturb-bf16", action="store_true",
                   help="round the model's initial weights to bf16 (the loss check's yardstick run)")
    p.add_argument("-m", dest="module", action="store_true")
    p.add_argument("target", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.target and args.target[0] == "--":
        args.target = args.target[1:]
    if not args.target:
        p.error("give the script to run after --")
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Install the fixes and the probe, run the script, undo everything; the result (JSON-ready)."""
    selection = parse_selection(args.fixes)
    target = Target(args.target[0], tuple(args.target[1:]), module=args.module)
    target.check()
    seed_everything(args.seed)
    machine = this_machine()
    started = time.perf_counter()
    installed = install(selection, machine)
    stop_perturbing = round_weights_to_bf16() if args.perturb_bf16 else None
    probe = StepProbe(args.steps, args.loss_steps)
    probe.install()
    try:
        outcome = run_target(target, StopProbe)
    finally:
        probe.uninstall()
        if stop_perturbing is not None:
            stop_perturbing()
        installed.undo()
    result: dict[str, Any] = {"version": RESULT_VERSION, "pid": os.getpid(), "seed": args.seed,
                              "wall_s": time.perf_counter() - started, "fixes": installed.report(),
                              "exit_code": outcome.exit_code, "stopped_by": outcome.stopped_by,
                              "error": outcome.error}
    result.update(probe.result())
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: 0 when the result was written (the script's own ending is in it), 2 on bad input."""
    logging.basicConfig(level=logging.WARNING, format="stave child: %(message)s")
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        result = run(args)
    except StaveError as exc:
        log.error("%s", exc)
        atomic_write_json(args.out, {"version": RESULT_VERSION, "exit_code": 2, "stopped_by": "error",
                                     "error": str(exc), "fixes": []})
        return 2
    atomic_write_json(args.out, result, indent=None)
    # The result is written: a script that ended with os._exit skipped the teardown on purpose.
    leave_if_hard_exit(0)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Out at once, the result written: a thread or process pool the script left running must not
    # hold the run until its time limit, and the script's atexit handlers would repeat its writes.
    os._exit(code)
