"""`stave doctor --verify` against the hand-applied fix, on the planted scenarios whose top finding is injectable.

For each selected scenario of ``benchmarks/scenarios/matrix.toml`` (its first variant: 2 cores, no
hog) whose expected finding has an injectable fix (:data:`stave.doctor.fix_map.FIX_MAP`):

1. ``stave doctor --steps N --verify-top K --verify-pairs P --json`` on the planted script (K = 1 by
   default): the verified finding that is the expected one (else the top one), its estimate, the
   injected fix's measured speedup and interval (``P`` pairs);
2. the hand fix: one warm-up pair, then ``P`` interleaved pairs of plain runs, planted and
   ``--fixed`` (the script's own timing line, the scenario's statistic): the median pair ratio and
   its min-max;
3. the verdict (issue 17): ``--verify`` within 15 % of the hand fix, or the hand fix inside
   ``--verify``'s interval from at least 5 pairs.

Results go to a JSON file after every scenario (atomic) and, with ``--write-docs``, between the
``verify`` markers of docs/benchmarks.md.

    PYTHONPATH=src python -m benchmarks.verify_vs_hand [--only NAME,...] [--pairs 5] [--steps N]
        [--verify-top K] [--out PATH] [--write-docs] [--from-json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from benchmarks.scenarios import (PLANTED_DIR, ROOT, Scenario, ScenarioError, core_set, cpu_model, load_matrix,
                                  missing_modules, native_bf16_cpu, run_child, script_cmd, select, timing)
from benchmarks import scenarios
from stave.files import atomic_write_json

DOCS_PATH = ROOT / "docs" / "benchmarks.md"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "verify_vs_hand.json"
DOCS_BEGIN = "<!-- verify:begin -->"
DOCS_END = "<!-- verify:end -->"
# The bar: --verify's measured speedup within this relative distance of the hand fix's ...
AGREE_REL = 0.15
# ... or the hand fix inside --verify's interval, from at least this many pairs.
MIN_PAIRS_FOR_INTERVAL = 5
# A doctor + verify run of one scenario past this is stopped (its row records it).
DOCTOR_TIMEOUT_S = 1800


@dataclass
class Row:
    """One scenario: the doctor's top finding and --verify's measurement beside the hand fix's."""

    scenario: str
    expect: str
    statistic: str
    top: str | None = None
    est_speedup: float | None = None
    fixes: str = ""
    verify_status: str = ""
    verify_speedup: float | None = None
    verify_interval: list[float] | None = None
    verify_pairs: int = 0
    hand_ratios: list[float] = field(default_factory=list)
    hand_args: list[str] = field(default_factory=list)
    error: str | None = None
    load_avg_1min: list[float] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def hand_speedup(self) -> float | None:
        return statistics.median(self.hand_ratios) if self.hand_ratios else None

    @property
    def agrees(self) -> bool | None:
        """Within AGREE_REL, or the hand fix inside the interval from enough pairs (None: not comparable)."""
        v, h = self.verify_speedup, self.hand_speedup
        if v is None or h is None:
            return None
        if abs(v / h - 1.0) <= AGREE_REL:
            return True
        lo, hi = self.verify_interval or (v, v)
        return self.verify_pairs >= MIN_PAIRS_FOR_INTERVAL and lo <= h <= hi


def injectable_expectations() -> set[str]:
    """Finding IDs with an injectable fix (the doctor's table; SMALL_BATCH needs an explicit flag)."""
    from stave.doctor.fix_map import FIX_MAP

    return set(FIX_MAP) - {"SMALL_BATCH"}


def doctor_verify_cmd(scenario: Scenario, steps: int, pairs: int, json_path: Path, top: int = 1) -> list[str]:
    """The planted script under ``stave doctor --verify-top TOP``."""
    variant = scenario.variants[0]
    return [sys.executable, "-m", "stave", "doctor", "--quiet", "--steps", str(steps), "--warmup",
            str(scenario.warmup), "--verify-top", str(top), "--verify-pairs", str(pairs), "--json", str(json_path),
            str(PLANTED_DIR / scenario.script), "--steps", str(steps), *variant.args]


def hand_ratio(scenario: Scenario, a: dict[str, Any], b: dict[str, Any]) -> float:
    """Planted over fixed for a step statistic; fixed over planted for samples per second."""
    stat = scenario.statistic
    return b[stat] / a[stat] if stat == "samples_per_s" else a[stat] / b[stat]


def measure(scenario: Scenario, pairs: int, steps: int, tmp: Path, top: int = 1) -> Row:
    """One row: --verify, then the hand fix's interleaved pairs (after a warm-up pair)."""
    row = Row(scenario.name, scenario.expect, scenario.statistic)
    started = time.perf_counter()
    cpus = core_set(scenario.variants[0].cores)
    try:
        json_path = tmp / f"{scenario.name}.json"
        row.load_avg_1min.append(os.getloadavg()[0])
        run_child(doctor_verify_cmd(scenario, steps, pairs, json_path, top), cpus, DOCTOR_TIMEOUT_S)
        report = json.loads(json_path.read_text(encoding="utf-8"))
        verified = (report.get("verify") or {}).get("findings") or []
        if verified:
            item = next((v for v in verified if v["id"] == scenario.expect), verified[0])
            row.top, row.est_speedup, row.fixes = item["id"], item["est_speedup"], item["fixes"]
            row.verify_status, row.verify_speedup = item["status"], item["measured_speedup"]
            row.verify_interval, row.verify_pairs = item["interval"], item["pairs"]
        variant = scenario.variants[0]
        row.hand_args = scenarios.hand_fix_args(scenario, row.fixes)
        fixed_cmd = script_cmd(scenario, variant, steps, fixed=True) + row.hand_args
        for pair in range(pairs + 1):  # the first pair warms the caches and is dropped
            row.load_avg_1min.append(os.getloadavg()[0])
            a = timing(run_child(script_cmd(scenario, variant, steps, fixed=False), cpus))
            b = timing(run_child(fixed_cmd, cpus))
            if pair > 0:
                row.hand_ratios.append(hand_ratio(scenario, a, b))
    except (ScenarioError, OSError, ValueError, KeyError) as exc:
        row.error = str(exc)
    row.seconds = time.perf_counter() - started
    return row


def _x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def render_markdown(rows: Sequence[Row], meta: dict[str, Any]) -> str:
    """The docs table: per scenario, estimate, --verify [interval], hand fix [min-max], verdict."""
    lines = [
        f"Run {meta['date']} on {meta['machine']}; {meta['pairs']} pairs per side, {meta['steps']} steps per run; "
        f"1-min load average {meta['load_min']:.1f}-{meta['load_max']:.1f} (the runs' own load included; "
        "above about 3 on 2 cores other work shared the machine, and the intervals show how much). "
        "Where a scenario maps the injected fix's parameter to a script option, the hand fix uses the value "
        "the doctor named (the option is shown under the hand fix).",
        "",
        f"Command: `{meta['command']}`",
        "",
        "| scenario | finding verified (expected, when another) | injected fix | estimate | --verify [interval] | hand fix [min-max] | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        interval = f" [{r.verify_interval[0]:.2f}-{r.verify_interval[1]:.2f}]" if r.verify_interval else ""
        hand = (f"{_x(r.hand_speedup)} [{min(r.hand_ratios):.2f}-{max(r.hand_ratios):.2f}]" if r.hand_ratios else "—")
        if r.hand_args:
            hand += f" `{' '.join(r.hand_args)}`"
        top = r.top or "—"
        top = top if top == r.expect else f"{top} ({r.expect})"
        if r.error:
            verdict = f"error: {r.error[:80]}"
        elif r.verify_status and r.verify_status != "kept":
            verdict = f"--verify: {r.verify_status}"
        else:
            verdict = {True: "agrees", False: "disagrees", None: "not comparable"}[r.agrees]
        lines.append(f"| {r.scenario} | {top} | `{r.fixes or '—'}` | {_x(r.est_speedup)} | "
                     f"{_x(r.verify_speedup)}{interval} | {hand} | {verdict} |")
    compared = [r for r in rows if r.agrees is not None]
    agree = sum(1 for r in compared if r.agrees)
    lines += ["", f"Agreement (within {AGREE_REL:.0%}, or the hand fix inside the interval from ≥ "
              f"{MIN_PAIRS_FOR_INTERVAL} pairs): {agree} of {len(compared)} comparable rows."]
    return "\n".join(lines)


def write_docs(path: Path, markdown: str) -> None:
    """Replace the block between the verify markers (appended as a section when absent)."""
    scenarios.write_docs(path, markdown, DOCS_BEGIN, DOCS_END,
                         "`stave doctor --verify` against the hand-applied fix (`benchmarks/verify_vs_hand.py`)")


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; results to --out after every scenario, the docs block with --write-docs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", metavar="PATTERN", help="scenarios to run (as benchmarks/scenarios.py --only)")
    parser.add_argument("--pairs", type=int, default=MIN_PAIRS_FOR_INTERVAL, help="pairs per side (default 5)")
    parser.add_argument("--steps", type=int, help="steps per run (default: the scenario's quick_steps)")
    parser.add_argument("--verify-top", type=int, default=1,
                        help="findings --verify measures; the expected one among them is compared (default 1)")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--from-json", metavar="PATH", help="render (and --write-docs) a results file, run nothing")
    args = parser.parse_args(argv)
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
        markdown = render_markdown([Row(**r) for r in saved["rows"]], saved["meta"])
        print(markdown)
        if args.write_docs:
            write_docs(DOCS_PATH, markdown)
        return 0
    if args.pairs < 1:
        print(f"--pairs must be >= 1, got {args.pairs}", file=sys.stderr)
        return 2
    wanted = injectable_expectations()
    scenarios = [s for s in select(load_matrix(), args.only) if s.expect in wanted and s.nproc == 1]
    runnable = []
    for sc in scenarios:
        missing = missing_modules(sc)
        if missing:
            print(f"skip {sc.name}: {', '.join(missing)} not importable", file=sys.stderr)
        else:
            runnable.append(sc)
    if not runnable:
        print(f"no scenario with an injectable expected finding matches {args.only!r}", file=sys.stderr)
        return 2
    out_path = Path(args.out)
    rows: list[Row] = []
    meta: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{cpu_model()}, {os.cpu_count()} cores, native bf16: {native_bf16_cpu()}",
        "pairs": args.pairs, "steps": args.steps or "quick_steps", "verify_top": args.verify_top,
        "command": "python -m benchmarks.verify_vs_hand " + " ".join(argv if argv is not None else sys.argv[1:]),
    }

    def save() -> None:
        loads = [x for r in rows for x in r.load_avg_1min] or [os.getloadavg()[0]]
        meta.update(load_min=min(loads), load_max=max(loads))
        atomic_write_json(out_path, {"schema": "stave.verify_vs_hand/1", "meta": meta,
                                     "rows": [asdict(r) for r in rows]})

    with tempfile.TemporaryDirectory(prefix="stave-verify-bench-") as tmp:
        for sc in runnable:
            print(f"{sc.name}: --verify and the hand fix, {args.pairs} pairs each ...", file=sys.stderr, flush=True)
            row = measure(sc, args.pairs, args.steps or sc.quick_steps, Path(tmp), args.verify_top)
            rows.append(row)
            save()
            print(f"  top {row.top}: --verify {_x(row.verify_speedup)} ({row.verify_status}), hand "
                  f"{_x(row.hand_speedup)}{'; ' + row.error if row.error else ''}", file=sys.stderr, flush=True)
    markdown = render_markdown(rows, meta)
    print(markdown)
    if args.write_docs:
        write_docs(DOCS_PATH, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
