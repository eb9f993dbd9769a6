"""The hog goal alone: the doctor on the matrix's 2-core hog rows, without the A/B pairs.

    PYTHONPATH=src python -m benchmarks.hog_doctor --only tiny_batch,healthy --out hog.json

For each named scenario, its first 2-core row with a background hog runs under ``stave doctor``
once, beside a busy loop pinned to the first core (as ``benchmarks/scenarios.py`` runs it). The
findings are compared with the same row without the hog, read from the newest saved matrix
results (``benchmarks/results/scenarios-*.json``, or ``--quiet-from``): consistent when the top
finding about the job is the quiet row's (MACHINE_BUSY first lets the second count), and for a
healthy control when MACHINE_BUSY is all that is said. A doctor run is about a minute a row; the
full matrix (``make bench``) measures the fixes too. Results go to ``--out`` after every row.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from benchmarks import scenarios as S

RESULTS_GLOB = str(S.ROOT / "benchmarks" / "results" / "scenarios-*.json")


def quiet_findings(paths: Sequence[str]) -> dict[tuple[str, str], list[str]]:
    """(scenario, row label) -> finding ids, the newest file's row winning."""
    out: dict[tuple[str, str], list[str]] = {}
    for path in sorted(paths, key=os.path.getmtime):
        for row in json.loads(Path(path).read_text(encoding="utf-8")).get("rows", []):
            if "variant" in row and row.get("findings") is not None and row.get("status") != "failed":
                out[(row["scenario"], row["variant"])] = [f[0] for f in row["findings"]]
    return out


def verdict(expect: str, quiet: list[str] | None, hogged: list[str]) -> str:
    """'consistent', 'miss' or 'no quiet row' for one hog row's finding ids."""
    top = S.job_top([[i] for i in hogged], True)
    if not expect:  # a healthy control: beside a hog, MACHINE_BUSY only
        return "consistent" if top is None else "miss"
    if quiet is None:
        return "no quiet row"
    quiet_top = S.job_top([[i] for i in quiet], False)
    return "consistent" if top == quiet_top else "miss"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", required=True, help="comma-separated scenario names")
    parser.add_argument("--out", default="hog_doctor.json", help="results JSON (rewritten after every row)")
    parser.add_argument("--quiet-from", default=RESULTS_GLOB, help="glob of matrix results holding the quiet rows")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    matrix = {sc.name: sc for sc in S.load_matrix()}
    unknown = [n for n in names if n not in matrix]
    if unknown:
        print(f"no scenario named {', '.join(unknown)} (see benchmarks/scenarios.py --list)", file=sys.stderr)
        return 2
    quiet = quiet_findings(glob.glob(args.quiet_from))
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(names, 1):
            sc = matrix[name]
            variant = next((v for v in sc.variants if v.hog and v.cores == 2), None)
            if variant is None or S.missing_modules(sc):
                print(f"[{i}/{len(names)}] {name}: no 2-core hog row, or its modules are missing; skipped",
                      file=sys.stderr)
                continue
            cpus = S.core_set(variant.cores)
            report = Path(tmp) / f"{name}.json"
            t0 = time.perf_counter()
            error = ""
            with S.Hog(min(cpus)):
                try:
                    S.run_child(S.doctor_cmd(sc, variant, sc.steps, report), cpus)
                    found = [[f["id"], f.get("est_speedup")] for f in json.loads(report.read_text())["findings"]]
                except (S.ScenarioError, OSError, ValueError, KeyError) as exc:
                    found, error = [], str(exc)[:300]
            q = quiet.get((name, variant.label.removesuffix("/hog")))
            row = {"scenario": name, "variant": variant.label, "expect": sc.expect, "quiet": q,
                   "findings": found, "error": error, "seconds": round(time.perf_counter() - t0, 1),
                   "verdict": "failed" if error else verdict(sc.expect, q, [f[0] for f in found])}
            rows.append(row)
            print(f"[{i}/{len(names)}] {name:28s} {row['verdict']:13s} quiet {q} | hog "
                  f"{', '.join(f'{f[0]} {f[1]:.2f}x' for f in found) or 'none'} ({row['seconds']:.0f} s)",
                  file=sys.stderr, flush=True)
            Path(args.out).write_text(json.dumps({"cpu": S.cpu_model(), "rows": rows}, indent=1), encoding="utf-8")
    ok = sum(r["verdict"] == "consistent" for r in rows)
    judged = sum(r["verdict"] in ("consistent", "miss") for r in rows)
    print(f"{ok}/{judged} hog rows consistent; {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
