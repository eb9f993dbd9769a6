"""Benchmark: the doctor's overhead on a loop with short steps.

Runs the same small training loop plainly and under ``stave doctor``, each in its own process,
interleaved (plain, doctor, plain, doctor, ...), and compares steady-state throughput as the loop
itself measures it (samples per second over the steps after warm-up). The goal (issue 2): the
doctor keeps at least 98% of the plain run's throughput on steps of 50 ms or less.

    python -m benchmarks.doctor_overhead [--pairs 5] [--steps 300] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stave.analyze.stats import median, relative_spread
from benchmarks.console import progress, result_json

GOAL_RATIO = 0.98
WARMUP_STEPS = 30


def workload(steps: int, out: str) -> None:
    """The measured loop: a small CNN on in-memory data through a DataLoader (steps of ~30-50 ms)."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4096, 3, 32, 32), torch.randint(0, 10, (4096,)))
    loader = DataLoader(data, batch_size=64, shuffle=True, drop_last=True)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    stamps: list[float] = []
    step = 0
    while step < steps:
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            stamps.append(time.perf_counter())
            step += 1
            if step >= steps:
                break
    measured = stamps[WARMUP_STEPS:]
    rate = 64 * (len(measured) - 1) / (measured[-1] - measured[0])
    Path(out).write_text(json.dumps({"samples_per_s": rate, "step_ms": 1e3 / rate * 64}))


def _run(doctor: bool, steps: int, tmp: str, index: int) -> dict[str, float]:
    out = os.path.join(tmp, f"{'doctor' if doctor else 'plain'}-{index}.json")
    cmd = [sys.executable, "-m", "benchmarks.doctor_overhead", "--workload", "--steps", str(steps), "--out", out]
    if doctor:
        cmd = [sys.executable, "-m", "stave", "doctor", "--quiet", "--no-probes", "-m", "benchmarks.doctor_overhead",
               "--workload", "--steps", str(steps), "--out", out]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads(Path(out).read_text())


def main(argv: list[str] | None = None) -> int:
    """Run the interleaved pairs and print (and optionally write) the result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--workload", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.workload:
        workload(args.steps, args.out)
        return 0
    ratios = []
    rows = []
    with tempfile.TemporaryDirectory(prefix="stave-overhead-") as tmp:
        _run(False, WARMUP_STEPS + 10, tmp, -1)  # warm the page cache and the import caches
        for i in range(args.pairs):
            plain = _run(False, args.steps, tmp, i)
            doc = _run(True, args.steps, tmp, i)
            ratio = doc["samples_per_s"] / plain["samples_per_s"]
            ratios.append(ratio)
            rows.append({"pair": i, "plain_samples_per_s": plain["samples_per_s"],
                         "doctor_samples_per_s": doc["samples_per_s"], "ratio": ratio,
                         "plain_step_ms": plain["step_ms"]})
            progress(f"pair {i}: plain {plain['samples_per_s']:.0f}/s ({plain['step_ms']:.1f} ms/step), "
                     f"doctor {doc['samples_per_s']:.0f}/s, ratio {ratio:.3f}")
    result = {
        "benchmark": "doctor_overhead",
        "pairs": rows,
        "median_ratio": median(ratios),
        "spread": relative_spread(ratios),
        "min_ratio": min(ratios),
        "max_ratio": max(ratios),
        "goal": GOAL_RATIO,
        "meets_goal": median(ratios) >= GOAL_RATIO,
    }
    result_json(result)
    if args.json:
        from stave.files import atomic_write_json

        atomic_write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
