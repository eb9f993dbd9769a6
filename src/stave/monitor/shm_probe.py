"""What a batch costs to cross from a loader worker to the trainer, on this machine.

A DataLoader worker collates each batch into a fresh shared-memory block (``_new_shared``: a file
in ``/dev/shm``, mapped and faulted in page by page) so the trainer can map it without a copy
through the pipe. That block is new memory every batch: the page faults and zeroing cost far more
per byte than the copy itself (about 1 GB/s where a plain copy runs at several), and a run that
loads in the main process never pays it, so its measurements cannot show it. This probe times the
collate of a batch of the run's size into shared memory against the same collate into ordinary
memory, after the run, and gives the difference per byte; the step model adds it to the loading
when a fix moves loading into workers.
"""

from __future__ import annotations

import logging
import statistics
import time

import torch

log = logging.getLogger(__name__)

# Probe batches are capped at this size: the cost is per byte (per page), so a 16 MiB batch tells
# the rate of a larger one, and the probe must not take memory the user's job may need.
MAX_PROBE_BYTES = 16 * 1024 * 1024
# Below this a batch's shared-memory cost is dominated by the fixed per-block system calls;
# the rate is measured at least at this size (the per-byte rate, not the call, is wanted).
MIN_PROBE_BYTES = 1024 * 1024
# Samples per probe batch (the collate stacks this many tensors, as default_collate does).
PROBE_SAMPLES = 16
# Timed collates per side at most, and at least (a median of fewer would be one noisy reading).
MAX_REPS = 15
MIN_REPS = 3


def _collate_shared(parts: list[torch.Tensor]) -> torch.Tensor:
    # What torch.utils.data's default_collate does inside a worker process.
    numel = sum(p.numel() for p in parts)
    storage = parts[0]._typed_storage()._new_shared(numel, device=parts[0].device)
    out = parts[0].new(storage).resize_(len(parts), *parts[0].shape)
    return torch.stack(parts, 0, out=out)


def shm_collate_s_per_byte(batch_bytes: int, budget_s: float = 0.3) -> float | None:
    """Seconds per byte that collating into shared memory costs beyond an ordinary collate.

    ``None`` when shared memory cannot be used here (no ``/dev/shm``, a sandbox) or the budget
    does not fit ``MIN_REPS`` pairs.
    """
    nbytes = int(min(max(batch_bytes, MIN_PROBE_BYTES), MAX_PROBE_BYTES))
    per_sample = max(1, nbytes // 4 // PROBE_SAMPLES)
    gen = torch.Generator().manual_seed(0)
    parts = [torch.rand(per_sample, generator=gen) for _ in range(PROBE_SAMPLES)]
    total_bytes = per_sample * 4 * PROBE_SAMPLES
    deadline = time.perf_counter() + budget_s
    shared: list[float] = []
    plain: list[float] = []
    try:
        while len(shared) < MAX_REPS and (len(shared) < MIN_REPS or time.perf_counter() < deadline):
            t0 = time.perf_counter()
            out = _collate_shared(parts)
            t1 = time.perf_counter()
            del out  # unmapped and unlinked before the next, as a consumed batch is
            torch.stack(parts, 0)
            t2 = time.perf_counter()
            shared.append(t1 - t0)
            plain.append(t2 - t1)
            if len(shared) == MIN_REPS and time.perf_counter() > deadline + budget_s:
                break  # a loaded machine: keep the three pairs, do not overrun further
    except (RuntimeError, OSError) as exc:
        log.debug("shared-memory probe skipped: %s", exc)
        return None
    extra_s = statistics.median(shared) - statistics.median(plain)
    return max(0.0, extra_s) / total_bytes
