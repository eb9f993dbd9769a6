"""Benchmark: the doctor's estimate of each planted bottleneck beside the measured gain of its fix.

For every planted script in ``tests/planted/`` (a plain PyTorch script with one bottleneck and a
``--fixed`` flag that applies the fix the doctor should suggest):

1. run it under ``stave doctor --json`` and read the ``est_speedup`` of the planted finding;
2. run it plainly without and with ``--fixed``, interleaved (A B A B ...), each run printing its
   own step timing after warm-up; the measured speedup is the median over pairs of the ratio of
   the statistic the finding's estimate is defined on (median or mean step time, or samples/s for
   SMALL_BATCH, whose fix changes the batch), with the spread over pairs;
3. report whether estimate and measurement agree within a factor of 2.

    python -m benchmarks.doctor_estimates [--pairs 3] [--only NAME ...] [--json PATH] [--write-docs]

``--write-docs`` replaces the table between the ``doctor-estimates`` markers in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from stave.analyze.stats import median, relative_spread
from stave.errors import InputError, OutputError, UsageError
from stave.files import atomic_write_json, atomic_write_text

# Named explicitly: run as ``python -m`` this module's __name__ is "__main__", outside "stave".
log = logging.getLogger("benchmarks.doctor_estimates")

# Estimate and measurement "agree" when neither is more than twice the other (the bar).
AGREEMENT_FACTOR = 2.0
# Timing line the planted scripts print last (tests/planted/_timing.py).
TIMING_PREFIX = "PLANTED-TIMING "
DOCS_BEGIN = "<!-- doctor-estimates:begin -->"
DOCS_END = "<!-- doctor-estimates:end -->"
# A run that takes longer than this is stuck (the slowest planted run takes well under a minute
# on a quiet 2-core machine).
RUN_TIMEOUT_S = 900


@dataclass(frozen=True)
class PlantedCase:
    """One planted script: the finding it plants and how its fix is measured.

    ``statistic``: the key of the script's timing line the estimate is defined on;
    ``median_step_s`` and ``mean_step_s`` shrink with a fix, ``samples_per_s`` grows.
    ``finding`` is ``None`` for the healthy control (no finding expected; its ``--fixed`` run is
    the same script, so its ratio shows the noise floor).
    """

    name: str
    finding: str | None
    doctor_steps: int
    statistic: str
    plain_steps: int = 60


PLANTED: tuple[PlantedCase, ...] = (
    PlantedCase("io_latency", "DATA_IO_BOUND", 40, "mean_step_s"),
    PlantedCase("cpu_transforms", "DATA_CPU_BOUND", 20, "mean_step_s", plain_steps=30),
    PlantedCase("worker_startup", "DATA_WORKER_STARTUP", 30, "mean_step_s", plain_steps=40),
    PlantedCase("oversubscription", "THREAD_OVERSUBSCRIPTION", 30, "median_step_s"),
    PlantedCase("float64_batches", "BATCH_DTYPE", 30, "median_step_s"),
    PlantedCase("tiny_batch", "SMALL_BATCH", 100, "samples_per_s", plain_steps=200),
    # A leak's line needs the sampler's ~10 Hz windows over a second or more of counted steps: its
    # steps take 5-10 ms in bf16 on a CPU with native bf16 (100 of them were borderline).
    PlantedCase("leaked_graph", "MEMORY_GROWTH", 250, "median_step_s"),
    PlantedCase("checkpoint_stall", "STEP_OUTLIERS", 40, "mean_step_s", plain_steps=120),
    PlantedCase("fp32_compute", "NO_MIXED_PRECISION", 30, "median_step_s"),
    PlantedCase("python_loss", "PYTHON_OVERHEAD", 150, "median_step_s", plain_steps=150),
    PlantedCase("fork_unsafe", "FORK_UNSAFE_HANDLE", 30, "median_step_s"),
    PlantedCase("healthy", None, 30, "median_step_s"),
)


@dataclass
class CaseResult:
    """Estimate and measurement for one planted script."""

    name: str
    finding: str | None
    top_finding: str | None
    est_speedup: float | None
    statistic: str
    measured_speedup: float | None = None
    spread: float | None = None
    ratios: list[float] = field(default_factory=list)
    baseline: float | None = None
    fixed: float | None = None
    agrees: bool | None = None
    load_avg_1min: list[float] = field(default_factory=list)


def repo_root() -> Path:
    """The source checkout this module runs from (the planted scripts are test files, not installed)."""
    root = Path(__file__).resolve().parents[1]
    if not (root / "tests" / "planted").is_dir():
        raise InputError(f"no tests/planted under {root}: run this benchmark from a source checkout")
    return root


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(cwd / "src") + os.pathsep + env.get("PYTHONPATH", "")
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise InputError(f"{' '.join(cmd)} ran past {RUN_TIMEOUT_S} s") from exc
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise InputError(f"{' '.join(cmd[-3:])} exited {proc.returncode}: {' | '.join(tail)}")
    return proc


def doctor_estimate(case: PlantedCase, root: Path, tmp: Path) -> tuple[str | None, float | None]:
    """(top finding ID, est_speedup of the planted finding) from one run under the doctor."""
    out = tmp / f"{case.name}.json"
    script = root / "tests" / "planted" / f"{case.name}.py"
    _run([sys.executable, "-m", "stave", "doctor", "--quiet", "--steps", str(case.doctor_steps),
          "--json", str(out), str(script), "--steps", str(case.doctor_steps)], root)
    report = json.loads(out.read_text(encoding="utf-8"))
    findings = report.get("findings", [])
    top = findings[0]["id"] if findings else None
    est = next((float(f["est_speedup"]) for f in findings if f["id"] == case.finding), None)
    return top, est


def plain_timing(case: PlantedCase, root: Path, fixed: bool) -> dict[str, Any]:
    """The timing line of one plain run of the script."""
    script = root / "tests" / "planted" / f"{case.name}.py"
    cmd = [sys.executable, str(script), "--steps", str(case.plain_steps)] + (["--fixed"] if fixed else [])
    proc = _run(cmd, root)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(TIMING_PREFIX):
            return json.loads(line[len(TIMING_PREFIX):])
    raise InputError(f"{script.name} printed no {TIMING_PREFIX.strip()} line")


def measure(case: PlantedCase, root: Path, pairs: int, result: CaseResult) -> None:
    """Interleaved plain runs (baseline, fixed, baseline, fixed, ...); fills the measured fields."""
    base_values: list[float] = []
    fixed_values: list[float] = []
    for i in range(pairs):
        # The machine's load beside each pair: ratios taken while other processes competed for the
        # cores are not evidence about a fix that needs free cores.
        result.load_avg_1min.append(os.getloadavg()[0])
        # Alternate which side goes first, so a drift in machine load does not favour one side.
        order = (False, True) if i % 2 == 0 else (True, False)
        got: dict[bool, float] = {}
        for fixed in order:
            got[fixed] = float(plain_timing(case, root, fixed)[case.statistic])
        base_values.append(got[False])
        fixed_values.append(got[True])
        grows = case.statistic == "samples_per_s"
        result.ratios.append(got[True] / got[False] if grows else got[False] / got[True])
    result.measured_speedup = median(result.ratios)
    result.spread = relative_spread(result.ratios)
    result.baseline = median(base_values)
    result.fixed = median(fixed_values)
    est = result.est_speedup if result.est_speedup is not None else 1.0
    ratio = est / result.measured_speedup
    result.agrees = 1.0 / AGREEMENT_FACTOR <= ratio <= AGREEMENT_FACTOR


def render_table(results: Sequence[CaseResult]) -> str:
    """The Markdown table docs/benchmarks.md shows."""
    rows = [
        "| planted script | planted finding | top finding | estimate | measured (median of pairs) | spread | statistic | within 2x |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        est = f"{r.est_speedup:.2f}x" if r.est_speedup is not None else "none"
        meas = f"{r.measured_speedup:.2f}x" if r.measured_speedup is not None else "-"
        spread = f"{r.spread:.0%}" if r.spread is not None else "-"
        agrees = "-" if r.agrees is None else ("yes" if r.agrees else "**no**")
        rows.append(
            f"| `{r.name}` | {r.finding or '(none: healthy)'} | {r.top_finding or 'none'} | {est} | {meas} "
            f"| {spread} | {r.statistic} | {agrees} |"
        )
    return "\n".join(rows)


def write_docs(path: Path, results: Sequence[CaseResult], pairs: int, seconds: float) -> None:
    """Replace the block between the markers in docs/benchmarks.md (atomically)."""
    text = path.read_text(encoding="utf-8")
    if DOCS_BEGIN not in text or DOCS_END not in text:
        raise OutputError(f"{path} has no {DOCS_BEGIN} ... {DOCS_END} block to replace")
    head, rest = text.split(DOCS_BEGIN, 1)
    _old, tail = rest.split(DOCS_END, 1)
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    stamp = time.strftime("%Y-%m-%d", time.gmtime())
    loads = [x for r in results for x in r.load_avg_1min]
    load = f", 1-min load average {min(loads):.1f}-{max(loads):.1f} during the pairs" if loads else ""
    omp = os.environ.get("OMP_NUM_THREADS")
    env = f", OMP_NUM_THREADS={omp}" if omp else ""
    block = (
        f"{DOCS_BEGIN}\nLast run: {stamp}, {machine}{env}{load}, {pairs} interleaved pairs per script, "
        f"{seconds / 60:.0f} min in all.\n\n{render_table(results)}\n{DOCS_END}"
    )
    atomic_write_text(path, head + block + tail)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the table (stdout) and optionally write JSON and the docs table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3, help="interleaved baseline/fixed pairs per script")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only these planted scripts")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    parser.add_argument("--write-docs", action="store_true", help="update the table in docs/benchmarks.md")
    args = parser.parse_args(argv)
    if args.pairs < 1:
        raise UsageError(f"--pairs must be >= 1, got {args.pairs}")
    names = {c.name for c in PLANTED}
    unknown = sorted(set(args.only or ()) - names)
    if unknown:
        raise UsageError(f"unknown planted script(s) {unknown}; choose from {sorted(names)}")
    cases = [c for c in PLANTED if not args.only or c.name in args.only]
    root = repo_root()
    start = time.perf_counter()
    results: list[CaseResult] = []
    with tempfile.TemporaryDirectory(prefix="stave-estimates-") as tmp:
        for case in cases:
            log.info("%s: doctor run", case.name)
            top, est = doctor_estimate(case, root, Path(tmp))
            result = CaseResult(case.name, case.finding, top, est, case.statistic)
            log.info("%s: %d interleaved plain pairs", case.name, args.pairs)
            measure(case, root, args.pairs, result)
            results.append(result)
    seconds = time.perf_counter() - start
    sys.stdout.write(render_table(results) + "\n")
    if args.json:
        atomic_write_json(args.json, {"pairs": args.pairs, "seconds": seconds, "results": [asdict(r) for r in results]})
    if args.write_docs:
        write_docs(root / "docs" / "benchmarks.md", results, args.pairs, seconds)
    return 0


if __name__ == "__main__":
    from stave.cli import configure_logging

    configure_logging(1)  # progress (one line per run) on stderr
    try:
        sys.exit(main())
    except (InputError, OutputError, UsageError) as exc:
        log.error("%s", exc)
        sys.exit(exc.exit_code)
