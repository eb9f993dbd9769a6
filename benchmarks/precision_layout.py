"""Benchmark: one ResNet-18 training step in fp32/bf16 x NCHW/channels_last, interleaved.

    python -m benchmarks.precision_layout [--size 64] [--batch 64] [--rounds 4] [--steps 4]

A check behind the ladder's seed-resnet18 numbers: how much bf16 autocast and channels_last can
buy on this CPU for exactly that model and input size, without the data pipeline. Each round times
``--steps`` steps of every variant in turn (A B C D, A B C D, ...) after warm-up; the median step
time per variant is printed with the min-max, and its speed relative to fp32 NCHW.
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks.console import progress, result_line

VARIANTS = {"fp32": (False, False), "bf16": (False, True), "bf16+channels_last": (True, True), "fp32+channels_last": (True, False)}


def main(argv: list[str] | None = None) -> int:
    """Time the four variants interleaved and print one line each."""
    import torch
    import torchvision
    from torch import nn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    x = torch.randn(args.batch, 3, args.size, args.size)
    y = torch.randint(0, 10, (args.batch,))
    built = {}
    for name, (channels_last, _) in VARIANTS.items():
        model = torchvision.models.resnet18(num_classes=10)
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
        built[name] = (model, torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9))

    def step(name: str) -> None:
        channels_last, bf16 = VARIANTS[name]
        model, opt = built[name]
        inputs = x.to(memory_format=torch.channels_last) if channels_last else x
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = nn.functional.cross_entropy(model(inputs), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for name in VARIANTS:  # warm-up: oneDNN primitive creation, allocator
        for _ in range(3):
            step(name)
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for r in range(args.rounds):
        progress(f"round {r + 1}/{args.rounds}")
        for name in VARIANTS:
            start = time.perf_counter()
            for _ in range(args.steps):
                step(name)
            times[name].append((time.perf_counter() - start) / args.steps)
    base = statistics.median(times["fp32"])
    for name, values in times.items():
        med = statistics.median(values)
        result_line(f"{name:20s} {med * 1e3:7.0f} ms/step ({min(values) * 1e3:.0f}-{max(values) * 1e3:.0f})  "
                    f"{base / med:.2f}x fp32")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
