"""What a batch costs to come from a loader worker instead of the main process, on this machine.

A worker collates each batch into a fresh shared-memory block, pickles a handle to it and sends it
through a pipe; the trainer's ``next()`` then receives the handle, maps the block and rebuilds the
tensors. A run that loads in the main process pays none of that, so its measurements cannot show
what moving the loading into workers would add. Measured on a 2-core EPYC for a batch of 16
``[3, 64, 64]`` float32 samples: 0.08 ms a batch in the main process, 1.34 ms a batch from one
worker with nothing else to do (the worker's side), and 0.8 ms inside ``next()`` for a batch that
was already waiting (the trainer's side), where the doctor's model had priced none of it.

This probe, run after a run's loading (in the main process, or in workers: what a worker keeps
paying per batch once its per-sample fetch goes), builds a loader over a dataset of the run's own
sample shapes and dtypes (each sample a copy of one template, so the dataset's own cost is nothing
next to the delivery) and times, in this order:

* ``main_s``: a batch fetched and collated in the main process;
* ``worker_s``: a batch from one worker when the trainer asks back to back (the worker's side:
  the worker is the producer and the trainer waits for each batch);
* ``receive_s``: ``next()`` for a batch that is already waiting (the trainer sleeps before each
  call long enough for the worker to finish it): the trainer's side, which it pays in the step;
* ``touch_s``: the trainer's first read of a received batch over a second read of it: mapping the
  worker's shared-memory pages, paid by whichever op of the step reads the batch first (a cast,
  the first layer). On a 2-core EPYC a 4 MB float64 batch's cast took 2.8 ms in the step and its
  float32 batch's first layer 1.5 ms more than warm: the bytes the batch ships cost the trainer too.

Every time is a median of steady batches, after the worker has started. The step model adds
``worker_s - main_s`` to each batch's loading in the workers and ``receive_s`` to the trainer's
step when a fix starts workers.
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, Dataset

log = logging.getLogger(__name__)

# Batches timed per side after the warm-up ones (the median of nine is steady to a few % here).
TIMED_BATCHES = 9
WARMUP_BATCHES = 3
# A probe batch is capped at this many bytes (the probe must not take memory the user's job may
# need, nor seconds: a 38 MB batch probed in 2.2 s); a larger batch is probed at fewer samples and
# scaled, which over-states its per-batch part (about 0.7 ms of the receive) by the same factor.
MAX_PROBE_BYTES = 32 * 1024 * 1024
# The trainer sleeps this many times the worker's batch time before each receive, so the batch is
# surely waiting when it asks.
READY_MARGIN = 3.0


@dataclass(frozen=True)
class DeliveryTimes:
    """Seconds per batch of the run's size: in the main process, from one worker back to back, and
    the trainer's receive of a batch that was waiting."""

    main_s: float
    worker_s: float
    receive_s: float
    touch_s: float = 0.0

    @property
    def worker_extra_s(self) -> float:
        """What a worker spends on a batch beyond the main process's fetch and collate."""
        return max(0.0, self.worker_s - self.main_s)


class _Templates(Dataset):
    """Samples of the run's shapes and dtypes, each a fresh copy of one template per field."""

    def __init__(self, shapes: list[tuple[list[int], torch.dtype]]) -> None:
        self.templates = [torch.zeros(shape, dtype=dtype) for shape, dtype in shapes]

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        return tuple(t.clone() for t in self.templates)


def _median_s(it, batches: int, pause_s: float = 0.0) -> float:
    times: list[float] = []
    for _ in range(batches):
        if pause_s > 0:
            time.sleep(pause_s)
        start = time.perf_counter()
        next(it)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _touch_s(it, batches: int, pause_s: float) -> float:
    """Median of a received batch's first full read less its second: the first touch of its pages."""
    extra: list[float] = []
    for _ in range(batches):
        time.sleep(pause_s)
        tensors = [t for t in next(it) if isinstance(t, torch.Tensor)]
        reads = []
        for _ in range(2):
            start = time.perf_counter()
            for t in tensors:
                t.sum()
            reads.append(time.perf_counter() - start)
        extra.append(max(0.0, reads[0] - reads[1]))
    return statistics.median(extra)


def probe_delivery(sample_shapes: list[tuple[list[int], torch.dtype]], batch_size: int,
                   budget_s: float = 2.0) -> DeliveryTimes | None:
    """Time a batch in the main process, from a worker, and its receive (``None``: cannot here).

    ``sample_shapes``: each batch tensor's per-sample shape and dtype; ``batch_size``: samples a
    batch. A batch larger than :data:`MAX_PROBE_BYTES` is probed at fewer samples and scaled.
    """
    if batch_size < 1 or not sample_shapes:
        return None
    per_sample = sum(max(1, int(torch.Size(s).numel())) * torch.empty((), dtype=d).element_size()
                     for s, d in sample_shapes)
    rows = max(1, min(batch_size, MAX_PROBE_BYTES // max(per_sample, 1)))
    scale = batch_size / rows
    dataset = _Templates(sample_shapes)
    deadline = time.perf_counter() + budget_s
    try:
        main_it = iter(DataLoader(dataset, batch_size=rows, num_workers=0))
        _median_s(main_it, WARMUP_BATCHES)
        main_s = _median_s(main_it, TIMED_BATCHES)
        loader = DataLoader(dataset, batch_size=rows, num_workers=1, prefetch_factor=2)
        it = iter(loader)
        try:
            _median_s(it, WARMUP_BATCHES)  # the worker's start, outside the timing
            worker_s = _median_s(it, TIMED_BATCHES)
            if time.perf_counter() > deadline:
                log.debug("delivery probe over budget before the receive side")
                return None
            receive_s = _median_s(it, TIMED_BATCHES, pause_s=READY_MARGIN * worker_s)
            touch_s = _touch_s(it, TIMED_BATCHES, pause_s=READY_MARGIN * worker_s)
        finally:
            del it  # shuts the worker down
    except (RuntimeError, OSError, ValueError) as exc:
        # No fork or shared memory here (a sandbox), or a dtype the collate does not take.
        log.debug("delivery probe skipped: %s", exc)
        return None
    return DeliveryTimes(main_s * scale, worker_s * scale, receive_s * scale, touch_s * scale)
