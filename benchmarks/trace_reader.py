"""Benchmark of the trace analyzer: a 1 GB trace in bounded memory, and the parser choice.

``python -m benchmarks.trace_reader`` (what ``make bench`` runs for the trace analyzer):

1. Builds a large trace by repeating the events of a real one (default: the shared fixture
   ``trace_diff__control__control.json.gz``) with shifted timestamps, step numbers and correlation
   ids, until the pretty-printed file reaches ``--size-mb`` (default 1024 MB of JSON). The same events
   are also written minified on one line and gzipped.
2. Analyses each file in a fresh process, several rounds interleaved (pretty, minified, gzip, pretty,
   ...), and reports per layout the median uncompressed MB/s (wall clock) with the spread over
   rounds, the CPU-time MB/s, and the peak RSS of the process (``ru_maxrss``).
3. Checks the three layouts give identical results (the ``stave.trace/1`` JSON, less path and size).
4. With ``--parsers``, compares the JSON parsers stave could use on the source trace, interleaved.
5. With ``--baseline SRC`` (the ``src`` folder of another stave checkout, e.g. ``git archive`` of the
   previous commit), runs that code on each layout too, interleaved with this one, and reports the
   speed ratio this/baseline per layout (wall and CPU medians).

Exit code 0 when every layout stays under the RSS bound and above the speed bound, 1 otherwise.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable
from benchmarks.console import progress, result_json, result_line

# The bounds the trace analyzer promises (issues 3 and 16): at most 512 MiB of memory for a 1 GB
# trace, and at least 50 MB/s of uncompressed JSON.
MAX_RSS_BYTES = 512 << 20
MIN_MB_PER_S = 50.0
DEFAULT_SOURCE = "trace_diff__control__control.json.gz"
# Time between repetitions of the source events, so steps of different copies never overlap.
REPEAT_GAP_US = 1000


def _default_source() -> Path:
    here = Path(__file__).resolve()
    for base in (Path.cwd(), here.parents[1]):
        candidate = base.parent / "shared" / "fixtures" / "traces" / DEFAULT_SOURCE
        if candidate.exists():
            return candidate
    raise SystemExit(f"cannot find {DEFAULT_SOURCE}; pass --source PATH")


def _shifted(events: list[dict], k: int, shift_us: float, step_offset: int, corr_offset: int) -> list[dict]:
    out = []
    for e in events:
        e = dict(e)
        if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M":
            e["ts"] = e["ts"] + k * shift_us
        name = e.get("name")
        if isinstance(name, str) and name.startswith("ProfilerStep#"):
            e["name"] = f"ProfilerStep#{int(name.split('#')[1]) + k * step_offset}"
        if "id" in e and isinstance(e["id"], int):
            e["id"] += k * corr_offset
        args = e.get("args")
        if isinstance(args, dict):
            args = dict(args)
            for key in ("correlation", "External id"):
                if isinstance(args.get(key), int):
                    args[key] += k * corr_offset
            e["args"] = args
        out.append(e)
    return out


def build_traces(source: Path, workdir: Path, size_mb: float) -> dict[str, Path]:
    """Write pretty, minified and gzipped copies of the repeated source events; returns their paths."""
    import msgspec

    with gzip.open(source, "rb") if source.suffix == ".gz" else open(source, "rb") as f:
        doc = json.load(f)
    events = doc.pop("traceEvents")
    meta = {k: v for k, v in doc.items()}
    timed = [e for e in events if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]
    lo = min(e["ts"] for e in timed)
    hi = max(e["ts"] + e.get("dur", 0) for e in timed)
    shift = hi - lo + REPEAT_GAP_US
    steps = sum(1 for e in timed if str(e.get("name", "")).startswith("ProfilerStep#"))
    corr_offset = 10 ** len(str(max((e.get("args") or {}).get("correlation", 0) or 0 for e in events) + 1))
    paths = {"pretty": workdir / "big.pretty.json", "min": workdir / "big.min.json"}
    target = size_mb * 1e6
    head = msgspec.json.encode(meta)[:-1]  # the metadata object, still open
    with open(paths["pretty"], "wb") as pretty, open(paths["min"], "wb") as mini:
        pretty.write(msgspec.json.format(head + b"}", indent=2)[:-2] + b',\n  "traceEvents": [\n')
        mini.write(head + b',"traceEvents":[')
        k = 0
        written = 0
        while written < target:
            chunk = msgspec.json.encode(_shifted(events, k, shift, max(steps, 1) * 10, corr_offset))
            body_min = chunk[1:-1]
            body_pretty = msgspec.json.format(chunk, indent=2)[1:-1].strip(b"\n")
            sep = b"," if k else b""
            mini.write(sep + body_min)
            pretty.write((b",\n" if k else b"") + body_pretty)
            written += len(body_pretty)
            k += 1
        pretty.write(b"\n  ]\n}\n")
        mini.write(b"]}")
    paths["gz"] = workdir / "big.pretty.json.gz"
    with open(paths["pretty"], "rb") as src, gzip.open(paths["gz"], "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst, 16 << 20)
    return paths


def run_one(path: Path, out: Path) -> None:
    """Analyse one trace in this process; write the report and this process's measurements."""
    from stave.report.trace_json import trace_json
    from stave.diagnose.trace_report import analyze_paths

    t0 = time.perf_counter()
    c0 = time.process_time()
    report = analyze_paths([path])
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    rss = peak_rss_bytes()
    result = trace_json(report)
    for t in result["traces"]:
        for key in ("path", "compressed", "uncompressed_bytes"):
            t.pop(key)
    for h in result.get("hta", []):
        h.pop("path")
    out.write_text(json.dumps({"wall_s": wall, "cpu_s": cpu, "peak_rss_bytes": rss,
                               "uncompressed_bytes": report.traces[0].uncompressed_bytes, "report": result}))


def peak_rss_bytes() -> int:
    """This process's peak resident memory: VmHWM (reset at exec, unlike ru_maxrss, which keeps the
    parent's peak from before the fork), else ru_maxrss."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _measure(path: Path, workdir: Path, src: Path | None = None) -> dict[str, Any]:
    out = workdir / f"result.{path.name}.json"
    env = dict(os.environ)
    # The child imports this module by name: the repository root (not installed) goes on its path,
    # after the stave source under comparison when one is given.
    root = str(Path(__file__).resolve().parents[1])
    first = [str(src), root] if src is not None else [root]
    env["PYTHONPATH"] = os.pathsep.join(first + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    subprocess.run([sys.executable, "-m", "benchmarks.trace_reader", "--run-one", str(path.resolve()), str(out.resolve())],
                   check=True, env=env)
    return json.loads(out.read_text())


# Reads one trace into stave's tables only (no analysis) and reports like run_one; run with -c so
# that any stave version (a --baseline without this module's options) can run it.
_READER_ONLY = """
import json, sys, time
from stave.trace.tables import load_trace
t0, c0 = time.perf_counter(), time.process_time()
data = load_trace(sys.argv[1])
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
rss = 0
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        rss = int(line.split()[1]) * 1024
json.dump({"wall_s": wall, "cpu_s": cpu, "peak_rss_bytes": rss,
           "uncompressed_bytes": data.stats.uncompressed_bytes, "report": None}, open(sys.argv[2], "w"))
"""


def _measure_reader(path: Path, workdir: Path, src: Path | None = None) -> dict[str, Any]:
    out = workdir / f"reader.{path.name}.json"
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    subprocess.run([sys.executable, "-c", _READER_ONLY, str(path), str(out)], check=True, env=env)
    return json.loads(out.read_text())


def _parser_candidates(data: bytes) -> dict[str, Callable[[], int]]:
    """Functions that decode every event of ``data`` (a minified trace) with one parser each."""
    import io

    from stave.trace.reader import TraceReader

    cands: dict[str, Callable[[], int]] = {}
    tmp = Path(tempfile.mkdtemp()) / "t.json"
    tmp.write_bytes(data)

    def stave_reader() -> int:
        return sum(len(c) for c in TraceReader(tmp).chunks())

    cands["msgspec typed structs on 8 MB pieces (stave)"] = stave_reader

    def stdlib() -> int:
        return len(json.loads(data)["traceEvents"])

    cands["json.loads whole file (stdlib)"] = stdlib
    try:
        import orjson

        cands["orjson.loads whole file"] = lambda: len(orjson.loads(data)["traceEvents"])
    except ImportError:
        pass
    try:
        import ijson

        if ijson.backend == "yajl2_c":
            cands["ijson yajl2_c items() streaming"] = lambda: sum(1 for _ in ijson.items(io.BytesIO(data), "traceEvents.item"))
    except ImportError:
        pass
    return cands


def compare_parsers(source: Path, rounds: int) -> list[dict[str, Any]]:
    """Decode the source trace with each parser, interleaved, ``rounds`` times; MB/s per parser."""
    with gzip.open(source, "rb") if source.suffix == ".gz" else open(source, "rb") as f:
        doc = json.load(f)
    data = json.dumps(doc, separators=(",", ":")).encode()
    cands = _parser_candidates(data)
    times: dict[str, list[float]] = {k: [] for k in cands}
    for fn in cands.values():
        fn()  # warm-up
    for _ in range(rounds):
        for name, fn in cands.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    mb = len(data) / 1e6
    return [
        {"parser": name, "mb_per_s": mb / statistics.median(ts), "spread": (max(ts) - min(ts)) / statistics.median(ts)}
        for name, ts in times.items()
    ]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.trace_reader", description=__doc__.split("\n\n")[0])
    p.add_argument("--source", type=Path, help=f"trace to repeat (default: shared fixture {DEFAULT_SOURCE})")
    p.add_argument("--size-mb", type=float, default=1024.0, help="size of the pretty-printed trace (default 1024)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds per layout (default 3)")
    p.add_argument("--workdir", type=Path, help="where to write the big traces (default: a temp dir, removed)")
    p.add_argument("--parsers", action="store_true", help="also compare JSON parsers on the source trace")
    p.add_argument("--out", type=Path, help="write the results as JSON")
    p.add_argument("--reader-only", action="store_true",
                   help="time reading into tables only (no analysis, no report comparison)")
    p.add_argument("--baseline", type=Path, metavar="SRC",
                   help="the src folder of another stave version: measured interleaved, ratio reported")
    p.add_argument("--run-one", nargs=2, metavar=("TRACE", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.run_one:
        run_one(Path(args.run_one[0]), Path(args.run_one[1]))
        return 0
    source = args.source or _default_source()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="stave-trace-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"source": str(source), "size_mb": args.size_mb, "layouts": {}}
    try:
        t0 = time.perf_counter()
        existing = {"pretty": workdir / "big.pretty.json", "min": workdir / "big.min.json",
                    "gz": workdir / "big.pretty.json.gz"}
        # A --workdir that already holds the three files (a previous run's) is reused as it is.
        reuse = args.workdir is not None and all(p.exists() for p in existing.values())
        paths = existing if reuse else build_traces(source, workdir, args.size_mb)
        progress(f"built traces in {time.perf_counter() - t0:.0f} s: "
                 + ", ".join(f"{k} {v.stat().st_size / 1e6:.0f} MB" for k, v in paths.items()))
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in paths}
        base_runs: dict[str, list[dict[str, Any]]] = {k: [] for k in paths}
        for r in range(args.rounds):
            for layout, path in paths.items():
                measure = _measure_reader if args.reader_only else _measure
                res = measure(path, workdir)
                runs[layout].append(res)
                progress(f"round {r + 1} {layout:6s} {res['uncompressed_bytes'] / 1e6 / res['wall_s']:6.1f} MB/s "
                         f"wall, peak RSS {res['peak_rss_bytes'] / 2**20:.0f} MiB")
                if args.baseline is not None:
                    base = measure(path, workdir, args.baseline)
                    base_runs[layout].append(base)
                    progress(f"round {r + 1} {layout:6s} {base['uncompressed_bytes'] / 1e6 / base['wall_s']:6.1f} "
                             "MB/s wall (baseline)")
        reports = {layout: json.dumps(rs[0]["report"], sort_keys=True) for layout, rs in runs.items()}
        identical = len(set(reports.values())) == 1
        ok = identical
        for layout, rs in runs.items():
            rates = [x["uncompressed_bytes"] / 1e6 / x["wall_s"] for x in rs]
            cpu_rates = [x["uncompressed_bytes"] / 1e6 / x["cpu_s"] for x in rs]
            rss = max(x["peak_rss_bytes"] for x in rs)
            med = statistics.median(rates)
            summary["layouts"][layout] = {
                "uncompressed_mb": rs[0]["uncompressed_bytes"] / 1e6,
                "file_mb": paths[layout].stat().st_size / 1e6,
                "mb_per_s_median": med,
                "mb_per_s_spread": (max(rates) - min(rates)) / med,
                "cpu_mb_per_s_median": statistics.median(cpu_rates),
                "peak_rss_mib": rss / 2**20,
            }
            ok &= rss <= MAX_RSS_BYTES and med >= MIN_MB_PER_S
            if base_runs[layout]:
                summary["layouts"][layout]["vs_baseline"] = {
                    "wall_ratio": statistics.median(x["wall_s"] for x in base_runs[layout]) / statistics.median(
                        x["wall_s"] for x in rs),
                    "cpu_ratio": statistics.median(x["cpu_s"] for x in base_runs[layout]) / statistics.median(
                        x["cpu_s"] for x in rs),
                }
        summary["identical_results"] = None if args.reader_only else identical
        if not args.reader_only:
            summary["events"] = runs["pretty"][0]["report"]["traces"][0]["events"]
            summary["steps"] = runs["pretty"][0]["report"]["traces"][0]["step_count"]
        if args.parsers:
            summary["parsers"] = compare_parsers(source, args.rounds)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    result_json(summary)
    if args.out:
        from stave.files import atomic_write_json

        atomic_write_json(args.out, summary)
    result_line(f"bounds: peak RSS <= {MAX_RSS_BYTES / 2**20:.0f} MiB, >= {MIN_MB_PER_S:.0f} MB/s, identical results: "
                + ("met" if ok else "NOT met"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
