"""The delivery probe: a batch of the run's shapes from the main process, from a worker, and received."""

from __future__ import annotations

import torch

from stave.monitor import delivery_probe
from stave.monitor.delivery_probe import probe_delivery


def test_a_worker_batch_costs_more_than_a_main_process_one_and_scales_a_large_batch(monkeypatch):
    times = probe_delivery([([3, 16, 16], torch.float32), ([], torch.int64)], 8)
    if times is None:  # no fork or shared memory in this sandbox
        return
    assert times.main_s > 0 and times.receive_s > 0 and times.touch_s >= 0.0
    # A worker collates into fresh shared memory, pickles a handle and sends it: never cheaper.
    assert times.worker_s > times.main_s and times.worker_extra_s == times.worker_s - times.main_s
    # A batch over the byte cap is probed at fewer samples and scaled to the run's batch.
    monkeypatch.setattr(delivery_probe, "MAX_PROBE_BYTES", 4 * 3 * 16 * 16 * 4)
    scaled = probe_delivery([([3, 16, 16], torch.float32)], 8)
    assert scaled is not None and scaled.main_s > 0


def test_nothing_to_probe_is_none():
    assert probe_delivery([], 8) is None
    assert probe_delivery([([3], torch.float32)], 0) is None
