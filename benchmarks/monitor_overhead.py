"""Benchmark: what the sampler thread costs a training loop (``python -m benchmarks.monitor_overhead``).

Two CPU workloads with steps of about 50 ms: ``gemm`` (an MLP's forward, backward and SGD step:
torch releases the GIL inside its kernels) and ``python`` (hundreds of tiny tensor ops per step:
the main thread holds the GIL most of the time, the worst case for a sampler that needs it).
Each pair runs a window of steps without and with a :class:`~stave.monitor.Monitor` at its
default rates, in alternating order (A B, B A, ...) after a warm-up; the result per workload is
the median over pairs of throughput(with) / throughput(without), with the spread, and the sampler
thread's own CPU time as a share of the monitored wall time.

This measures the monitor alone; the doctor's full overhead (hooks included) is measured by the
doctor's own benchmark.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Callable

import torch

from stave.monitor.sampler import Monitor


@dataclass
class OverheadResult:
    """One workload: per-pair throughput ratios (monitored / plain) and their summary."""

    workload: str
    step_ms_plain: float
    pairs: int
    ratios: list[float]
    median_ratio: float
    min_ratio: float
    max_ratio: float
    sampler_cpu_share: float


def _gemm_workload() -> Callable[[], None]:
    gen = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 1024))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.rand((128, 1024), generator=gen)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()

    return step


def _python_workload() -> Callable[[], None]:
    w = torch.ones(8, requires_grad=True)

    def step() -> None:
        loss = w.sum()
        for i in range(400):  # a Python loop in the loss: GIL-bound, tiny ops
            loss = loss + (w * (i % 7)).mean()
        loss.backward()
        with torch.no_grad():  # plain SGD by hand: tiny, and keeps torch.optim's imports out
            w.sub_(w.grad, alpha=1e-6)
        w.grad = None

    return step


WORKLOADS: dict[str, Callable[[], Callable[[], None]]] = {"gemm": _gemm_workload, "python": _python_workload}


def _window(step: Callable[[], None], steps: int, counter: list[int]) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        step()
        counter[0] += 1
    return time.perf_counter() - start


def measure(workload: str, pairs: int = 10, window_s: float = 1.0, warmup_s: float = 1.0) -> OverheadResult:
    """Run ``pairs`` interleaved plain/monitored windows of ``workload`` and summarize them."""
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; choose from {sorted(WORKLOADS)}")
    step = WORKLOADS[workload]()
    counter = [0]
    warm_end = time.perf_counter() + warmup_s
    while time.perf_counter() < warm_end:
        step()
    probe = _window(step, 2, counter) / 2
    steps = max(2, int(window_s / probe))
    ratios: list[float] = []
    plain_step_s: list[float] = []
    cpu_s = monitored_s = 0.0
    for i in range(pairs):
        order = ("plain", "monitored") if i % 2 == 0 else ("monitored", "plain")
        took: dict[str, float] = {}
        for kind in order:
            if kind == "plain":
                took[kind] = _window(step, steps, counter)
                continue
            monitor = Monitor(position=lambda: (counter[0], "forward"), worker_pids=list)
            monitor.start()
            took[kind] = _window(step, steps, counter)
            monitor.stop()
            cpu_s += monitor.self_cpu_s
            monitored_s += took[kind]
        ratios.append(took["plain"] / took["monitored"])
        plain_step_s.append(took["plain"] / steps)
    return OverheadResult(
        workload=workload,
        step_ms_plain=1e3 * statistics.median(plain_step_s),
        pairs=pairs,
        ratios=[round(r, 4) for r in ratios],
        median_ratio=statistics.median(ratios),
        min_ratio=min(ratios),
        max_ratio=max(ratios),
        sampler_cpu_share=cpu_s / monitored_s if monitored_s else 0.0,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write its results as JSON lines to stdout."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), action="append")
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--window-s", type=float, default=1.0)
    args = parser.parse_args(argv)
    for name in args.workload or sorted(WORKLOADS):
        result = measure(name, pairs=args.pairs, window_s=args.window_s)
        sys.stdout.write(json.dumps(asdict(result)) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
