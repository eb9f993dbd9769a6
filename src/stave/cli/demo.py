"""``stave demo``: the seed workload (examples/seed_baseline.py) under the doctor.

ResNet-18 on fake CIFAR through PIL with per-sample Resize/ToTensor/Normalize, batch 32,
``num_workers=0``, SGD: seed 002's baseline. Prints the diagnosis and writes the HTML and JSON
reports under ``stave-out/demo/`` (override with --html/--json).
"""

from __future__ import annotations

import argparse
from typing import Any

from stave.cli.doctor import run_doctor
from stave.cli.doctor_args import add_doctor_options

DEFAULT_STEPS = 25
DEFAULT_OUT = "stave-out/demo"


def register(sub: Any) -> None:
    """Add the ``demo`` subcommand."""
    p = sub.add_parser("demo", help="diagnose the seed workload (ResNet-18, fake CIFAR) with the doctor",
                       description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=64, help="image side (the seed's original is 224)")
    add_doctor_options(p)
    p.set_defaults(func=run, steps=DEFAULT_STEPS)


def run(args: argparse.Namespace) -> int:
    """Run the demo; returns the doctor's exit code."""
    import stave_examples.seed_baseline as seed

    from stave.capture.runner import Target
    from stave.cli.common import check_outputs

    if args.size < 8:
        from stave.errors import UsageError

        raise UsageError(f"--size must be >= 8, got {args.size}")
    args.json = args.json or f"{DEFAULT_OUT}/report.json"
    args.html = args.html or f"{DEFAULT_OUT}/report.html"
    check_outputs((args.json, "--json"), (args.html, "--html"), (args.timeline, "--timeline"),
                  (args.flamegraph, "--flamegraph"))
    # Enough samples for the steps asked for, within one epoch (no epoch-boundary stall in a demo).
    samples = max(64, (args.steps + 2) * 32)
    target = Target(seed.__file__, ("--size", str(args.size), "--samples", str(samples)))
    code = run_doctor(target, args)
    if not args.quiet:
        print(f"\nReports: {args.html} (open in a browser), {args.json}")
    return code
