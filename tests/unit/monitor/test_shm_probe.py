"""The shared-memory collate probe: a per-byte cost that is positive, bounded, and leaves nothing behind."""

from __future__ import annotations

import os

import torch

from stave.monitor.shm_probe import _collate_shared, shm_collate_s_per_byte


def test_shared_collate_matches_default_collate_and_lives_in_shared_memory() -> None:
    parts = [torch.full((5,), float(i)) for i in range(4)]
    out = _collate_shared(parts)
    assert torch.equal(out, torch.stack(parts)) and out.is_shared()


def test_the_rate_is_a_cost_per_byte_on_this_machine() -> None:
    before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    rate = shm_collate_s_per_byte(2 * 1024 * 1024, budget_s=0.2)
    if rate is None:  # a sandbox without shared memory: the probe says nothing, never raises
        return
    # Faulting fresh pages costs something, and no machine pays a second per kilobyte.
    assert 0.0 <= rate < 1e-3
    after = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    assert after <= before  # every probe block was unlinked
