"""Interleaved A/B timing of whole commands: how much faster each variant runs than the first.

    python -m benchmarks.interleaved_ab --pairs 5 "python trials/vae_ab.py" "env B=2048 python trials/vae_ab.py"

Each command runs as its own process and prints ``TIME <seconds per unit>`` (a step, a sample) as
its last such line. One warm-up round runs every command once and is thrown away; then ``--pairs``
rounds run them all, alternating the order (A B, B A, ...) so a drift of the machine lands on both
sides. For each variant the speedup over the first command is the median of the rounds' ratios,
with the spread (max - min) / median: on a noisy 2-core VM a spread over 50 % says the number is not
measured. The trials in ``benchmarks/trials/`` print the line; docs/benchmarks.md lists the runs.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys


def timed(command: str) -> float:
    """The command's last ``TIME x`` value; a clear error if it fails or prints none."""
    proc = subprocess.run(shlex.split(command), capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("TIME ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"interleaved_ab: {command!r} exited {proc.returncode} without a TIME line: {tail[0]}")
    return float(lines[-1].split()[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5, help="timed rounds after the warm-up round")
    parser.add_argument("commands", nargs="+", help="the baseline first, then the variants")
    args = parser.parse_args(argv)
    if len(args.commands) < 2 or args.pairs < 1:
        parser.error("give a baseline and at least one variant, and --pairs >= 1")
    times: dict[str, list[float]] = {c: [] for c in args.commands}
    for round_index in range(args.pairs + 1):
        order = args.commands if round_index % 2 == 0 else args.commands[::-1]
        for command in order:
            value = timed(command)
            if round_index:
                times[command].append(value)
        print(f"round {round_index}/{args.pairs} done", file=sys.stderr, flush=True)
    base = times[args.commands[0]]
    for command in args.commands[1:]:
        ratios = [a / b for a, b in zip(base, times[command])]
        middle = statistics.median(ratios)
        spread = (max(ratios) - min(ratios)) / middle
        print(f"{command}: speedup {middle:.2f}x, spread {spread:.0%}, rounds {[round(r, 2) for r in ratios]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
