"""Step timing for plain runs of the planted scripts (what ``benchmarks.doctor_estimates`` compares).

Plain PyTorch has no notion of "a step's time", so each planted script calls :meth:`StepTimer.step`
right after ``optimizer.step()``: a step then spans from the end of one optimizer step to the end
of the next, as the doctor measures it. The last line the script prints is one JSON object,
prefixed with ``PLANTED-TIMING``, with the median and mean step time over the steps after warm-up.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from typing import Callable

TIMING_PREFIX = "PLANTED-TIMING "


def planted_args(description: str, steps: int = 60, **extra: int | float | str) -> argparse.Namespace:
    """The options every planted script takes: --fixed, --steps, --warmup (plus ``extra``, typed by default)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--fixed", action="store_true", help="apply the fix the doctor should suggest")
    parser.add_argument("--steps", type=int, default=steps, help="optimizer steps to run, then stop")
    parser.add_argument("--warmup", type=int, default=5, help="steps left out of the printed timing")
    for name, default in extra.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    return parser.parse_args()


class StepTimer:
    """Durations of optimizer steps after ``warmup`` of them; ``done`` once ``steps`` were taken."""

    def __init__(self, steps: int, warmup: int, sync: "Callable[[], None] | None" = None) -> None:
        self.steps = steps
        self.warmup = warmup
        # On a GPU the host runs ahead of the device: ``sync`` (torch.cuda.synchronize) is called once
        # when the warm-up ends and once before the report, so the counted steps span the device's
        # own work, queued and drained, and a mean step is the device's pace. Never in between: a
        # sync per step would plant SYNC_IN_LOOP into every GPU script.
        self.sync = sync
        self.taken = 0
        self.samples = 0
        self.durations: list[float] = []
        self._last = time.perf_counter()

    def step(self, samples: int) -> None:
        """Call right after ``optimizer.step()``; ``samples`` is the batch's sample count."""
        if self.sync is not None and self.taken == self.warmup - 1:
            self.sync()
        now = time.perf_counter()
        if self.taken >= self.warmup:
            self.durations.append(now - self._last)
            self.samples += samples
        self._last = now
        self.taken += 1

    @property
    def done(self) -> bool:
        """True once the requested number of steps has run."""
        return self.taken >= self.steps

    def report(self) -> None:
        """Print the timing line (stdout, last line of the run)."""
        if self.sync is not None and self.durations:
            # The work still queued belongs to the counted steps: the last one ends when it drains.
            self.sync()
            self.durations[-1] += time.perf_counter() - self._last
        total = sum(self.durations)
        out = {
            "steps": len(self.durations),
            "median_step_s": statistics.median(self.durations) if self.durations else None,
            "mean_step_s": total / len(self.durations) if self.durations else None,
            "samples_per_s": self.samples / total if total > 0 else None,
        }
        print(TIMING_PREFIX + json.dumps(out), flush=True)


@functools.lru_cache(maxsize=1)
def native_bf16() -> bool:
    """Whether this CPU runs bf16 math natively (AVX512-BF16, AMX-BF16, Arm BF16), read from
    /proc/cpuinfo the way a user checks ``lscpu``. Without it, bf16 autocast on a CPU is emulated
    through fp32 and slower than fp32, so no one would call bf16 the healthy choice there. Read once:
    a script decides its precision once, and re-reading the file every step (as this did) put
    about 0.1 ms of Python (0.12 ms measured on a 2-core EPYC) into every planted step."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = {word for line in f if line.startswith(("flags", "Features")) for word in line.split()}
    except OSError:
        return False
    return bool({"avx512_bf16", "amx_bf16", "bf16"} & flags)


def cpu_autocast():
    """bf16 autocast where the CPU has native bf16, else plain fp32: the precision a careful user
    picks on this CPU, so the planted scripts' otherwise healthy compute is healthy on any CPU."""
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=native_bf16())


def planted_device():
    """The GPU planted scripts' device: CUDA where there is one (their matrix rows run only there),
    else the CPU, where they still run (tests/integration keeps them from rotting) but plant nothing
    the doctor's GPU rules look at."""
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def device_sync(device):
    """``torch.cuda.synchronize`` for a CUDA device (the timer's bounds), None on a CPU."""
    import torch

    return torch.cuda.synchronize if device.type == "cuda" else None


def device_autocast(device):
    """bf16 autocast on a GPU (every GPU the matrix runs on has bf16 tensor cores), the CPU's
    choice (:func:`cpu_autocast`) on a CPU."""
    import torch

    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else cpu_autocast()
