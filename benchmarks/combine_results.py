"""The latest result of each scenario row across several saved matrix runs, scored together.

A full matrix does not fit one working session on a 2-core machine; runs of parts of it are saved
(``benchmarks/scenarios.py --out X.json``). This reads them in order (a later run's row replaces an
earlier one's), prints the goals' numbers over the rows kept and writes them as one results file
that ``benchmarks/scenarios.py --from-json`` renders. The rows may come from different commits:
each input's ``meta`` is kept in the output's so that stays visible.

    PYTHONPATH=src python benchmarks/combine_results.py OUT.json RUN1.json RUN2.json ... [--quiet-first-rows]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[1] / "src")]

from benchmarks.scenarios import Row, summary  # noqa: E402
from stave.files import atomic_write_text  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("runs", type=Path, nargs="+")
    parser.add_argument("--quiet-first-rows", action="store_true",
                        help="keep only rows on two cores without a hog")
    args = parser.parse_args(argv)
    rows: dict[tuple[str, str], dict] = {}
    metas = []
    for path in args.runs:
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
            run_rows, meta = saved["rows"], saved["meta"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"combine_results: {path}: not a saved matrix run ({exc})", file=sys.stderr)
            return 2
        metas.append({"file": str(path), **meta})
        for r in run_rows:
            if r.get("status") == "skipped" or (args.quiet_first_rows and (r.get("hog") or r.get("cores") != 2)):
                continue
            rows[(r["scenario"], r["variant"])] = r
    s = summary([Row(**r) for r in rows.values()])
    print(json.dumps({k: s[k] for k in ("top_right", "estimate_within", "controls_clean", "hog_consistent")
                      if k in s}), f"{len(rows)} rows")
    meta = {
        # What --from-json renders: the runs' dates and machines as they were, their minutes summed.
        "date": " to ".join(sorted({str(m.get("date")) for m in metas})),
        "machine": "; ".join(sorted({str(m.get("machine")) for m in metas})),
        "pairs": min(int(m.get("pairs") or 0) for m in metas),
        "minutes": sum(float(m.get("minutes") or 0.0) for m in metas),
        "quick": any(m.get("quick") for m in metas),
        "only": "",
        "first_rows": all(m.get("first_rows") for m in metas),
        "load_min": min(float(m.get("load_min") or 0.0) for m in metas),
        "load_max": max(float(m.get("load_max") or 0.0) for m in metas),
        "command": "python benchmarks/combine_results.py " + " ".join(str(p) for p in args.runs)
                   + (" --quiet-first-rows" if args.quiet_first_rows else ""),
        "combined_from": metas,
    }
    atomic_write_text(args.out, json.dumps({"schema": 1, "meta": meta, "rows": list(rows.values())}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
