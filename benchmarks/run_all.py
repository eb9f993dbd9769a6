"""Run every benchmark of the project in sequence (what ``make bench`` runs).

    python -m benchmarks.run_all [--out bench-results] [--only NAME ...] [--quick] [--list]

Each benchmark runs in its own process (one crash or memory spike does not take the others down)
and writes its raw results as JSON under ``--out``; the ladder also writes HTML and PNG. A
benchmark whose module is not in this checkout is listed as missing, not run. At the end one line
per benchmark says where its numbers went; ``summary.json`` holds the same. Exit code 1 when a
benchmark that exists failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from stave.files import atomic_write_json
from benchmarks.console import progress, result_line

DEFAULT_OUT = Path("bench-results")


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: the module it needs, and its command line given the output folder."""

    name: str
    module: str
    argv: Callable[[Path, bool], list[str]]
    outputs: Callable[[Path], list[Path]]


def _ladder(workload: str) -> Benchmark:
    def argv(out: Path, quick: bool) -> list[str]:
        base = [
            "-m",
            "stave",
            "bench",
            "ladder",
            "--workload",
            workload,
            "--json",
            str(out / f"ladder-{workload}.json"),
            "--html",
            str(out / f"ladder-{workload}.html"),
            "--png",
            str(out / f"ladder-{workload}.png"),
        ]
        return base + (["--quick"] if quick else [])

    return Benchmark(
        f"ladder:{workload}",
        "stave.bench.ladder",
        argv,
        lambda out: [out / f"ladder-{workload}.{ext}" for ext in ("json", "html", "png")],
    )


def _simple(name: str, module: str, flag: str, quick_flag: str | None = None) -> Benchmark:
    def argv(out: Path, quick: bool) -> list[str]:
        args = ["-m", module, flag, str(out / f"{name}.json")]
        return args + ([quick_flag] if quick and quick_flag else [])

    return Benchmark(name, module, argv, lambda out: [out / f"{name}.json"])


def _data() -> Benchmark:
    """``stave bench data`` (the product command; its runner is stave.data.benchmark)."""
    def argv(out: Path, quick: bool) -> list[str]:
        return ["-m", "stave", "bench", "data", "--json", str(out / "data.json"), *(["--quick"] if quick else [])]

    return Benchmark("data", "stave.data.benchmark", argv, lambda out: [out / "data.json"])


BENCHMARKS: tuple[Benchmark, ...] = (
    _ladder("seed-resnet18"),
    _ladder("gpt-char"),
    _ladder("jpeg-resnet"),
    _data(),
    _simple("trace", "benchmarks.trace_reader", "--out"),
    _simple("doctor_overhead", "benchmarks.doctor_overhead", "--json"),
    _simple("doctor_estimates", "benchmarks.doctor_estimates", "--json"),
    # The ladder against a grid of configurations on the seed workload (about half an hour on 2 cores).
    _simple("ladder_oracle", "benchmarks.ladder_oracle", "--out", "--quick"),
    # The scenario matrix (planted bottlenecks x cores x background load): the longest of them all.
    _simple("scenarios", "benchmarks.scenarios", "--out", "--quick"),
)


def available(module: str) -> bool:
    """Whether ``module`` exists in this checkout (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def run_one(bench: Benchmark, out: Path, quick: bool) -> dict[str, object]:
    """Run one benchmark in a subprocess; its output streams through to this terminal."""
    if not available(bench.module):
        return {"name": bench.name, "status": "missing", "detail": f"module {bench.module} is not in this checkout"}
    command = [sys.executable, *bench.argv(out, quick)]
    progress(f"== {bench.name}: {' '.join(command[1:])}")
    start = time.perf_counter()
    code = subprocess.call(command)
    elapsed = time.perf_counter() - start
    written = [str(p) for p in bench.outputs(out) if p.exists()]
    status = "ok" if code == 0 else "failed"
    return {
        "name": bench.name,
        "status": status,
        "exit_code": code,
        "duration_s": round(elapsed, 1),
        "outputs": written,
    }


def summary_line(entry: dict[str, object]) -> str:
    """One line per benchmark for the final list."""
    if entry["status"] == "missing":
        return f"{entry['name']}: missing ({entry['detail']}); not run"
    outputs = ", ".join(entry["outputs"]) or "no output file"  # type: ignore[arg-type]
    if entry["status"] == "ok":
        return f"{entry['name']}: ok in {entry['duration_s']} s -> {outputs}"
    return f"{entry['name']}: FAILED (exit {entry['exit_code']}) after {entry['duration_s']} s -> {outputs}"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks asked for; returns 1 if one that exists failed."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run_all", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"results folder (default {DEFAULT_OUT}/)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these (see --list)")
    parser.add_argument("--quick", action="store_true", help="smoke-test sizes where a benchmark has them")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and whether they exist here")
    args = parser.parse_args(argv)
    if args.list:
        for bench in BENCHMARKS:
            result_line(f"{bench.name}: {'present' if available(bench.module) else 'missing'} ({bench.module})")
        return 0
    chosen = list(BENCHMARKS)
    if args.only:
        names = {b.name for b in BENCHMARKS}
        unknown = sorted(set(args.only) - names)
        if unknown:
            parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(sorted(names))}")
        chosen = [b for b in BENCHMARKS if b.name in args.only]
    args.out.mkdir(parents=True, exist_ok=True)
    entries = [run_one(bench, args.out, args.quick) for bench in chosen]
    atomic_write_json(args.out / "summary.json", {"benchmarks": entries, "quick": args.quick})
    result_line(f"\nbenchmark results in {args.out}/ (summary.json lists them):")
    for entry in entries:
        result_line("  " + summary_line(entry))
    return 1 if any(e["status"] == "failed" for e in entries) else 0


if __name__ == "__main__":
    sys.exit(main())
