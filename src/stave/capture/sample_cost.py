"""What a sample costs a loader worker, measured in the main process before the run's first batch.

Loading in the main process is timed with the main thread's CPU clock. When a transform runs torch
ops (torchvision's blur on a PIL image is a conv2d, tensor transforms are aten ops), part of that
work runs on the other threads of torch's intra-op pool: the main thread's clock misses it, and the
wall time the main thread spends waiting for those threads reads as time blocked off the CPU, as if
the sample waited for storage. A loader worker runs torch with one thread, so there all of that work
is CPU on the worker's one thread: moving such loading into workers costs more CPU than the main
thread's clock showed, and the "blocked" time does not overlap as storage latency would.

So, for a loader without workers and a script with more than one intra-op thread, the first few
samples (``dataset[0..n)``) are read at the script's thread count and at one thread, alternately,
and the ratio of the main thread's CPU per sample is kept (``LoaderInfo.one_thread_cpu_ratio``).
The random states of ``random``, numpy and torch and the thread count are restored afterwards, so
the script's own random stream and settings are unchanged; the pass is bounded by
:data:`PROBE_BUDGET_S`.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any

import numpy as np
import torch

log = logging.getLogger(__name__)

# Samples read per thread setting: enough for a stable per-sample mean over a few random crops,
# few enough that even 10 ms samples stay well inside the budget.
PROBE_SAMPLES = 8

# Wall-time budget of the pass (both settings together): slow samples give fewer reads, not a
# slower start.
PROBE_BUDGET_S = 0.5

# Main-thread CPU per pass below this is too little to time against the clock's resolution and
# the interpreter's noise: no ratio.
MIN_PASS_CPU_S = 200e-6


def _read_cpu_s(dataset: Any, index: int) -> float:
    c0 = time.thread_time()
    dataset[index]
    return time.thread_time() - c0


def one_thread_cpu_ratio(dataset: Any) -> float | None:
    """Main-thread CPU per sample at one intra-op thread over the same at the script's thread count.

    ``None`` when the script already runs one thread, the dataset has no ``len``, a read fails, or
    the samples are too cheap to time. Never below 1: one thread does at least the work the main
    thread did among several.
    """
    threads = torch.get_num_threads()
    if threads <= 1:
        return None
    try:
        n = min(PROBE_SAMPLES, len(dataset))
    except TypeError:
        return None
    if n < 1:
        return None
    states = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    many_s = one_s = 0.0
    start = time.perf_counter()
    try:
        dataset[0]  # first-call costs (lazy imports, caches) belong to neither setting
        for i in range(n):
            many_s += _read_cpu_s(dataset, i)
            torch.set_num_threads(1)
            try:
                one_s += _read_cpu_s(dataset, i)
            finally:
                torch.set_num_threads(threads)
            if time.perf_counter() - start > PROBE_BUDGET_S:
                break
    except Exception as exc:  # noqa: BLE001 - any error of the user's dataset: no ratio, the run goes on
        log.info("one-thread sample cost: dataset read failed (%s: %s)", type(exc).__name__, exc)
        return None
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
    if many_s < MIN_PASS_CPU_S:
        return None
    return max(1.0, one_s / many_s)
