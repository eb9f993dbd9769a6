"""The bytes a copy to a device moves are counted into the step's h2d phase.

Run on a CPU through the ``Tensor.to`` wrapper with a copy to the ``meta`` device (source on the
CPU, target elsewhere: the wrapper's host-to-device path). The bytes were recorded after the
copy's own phase had closed, so every step of a GPU run read 0 bytes copied (a lent H200, session
22: 79 MB a step from pageable memory, ``h2d_bytes_per_step`` 0).
"""

from __future__ import annotations

import torch

from stave.capture.hooks_copies import CopyHooks
from stave.capture.steps import StepTracker
from fake_clock import FakeClock


def test_a_copys_bytes_land_in_the_step_it_ran_in() -> None:
    tracker = StepTracker(FakeClock())
    hooks = CopyHooks(tracker)
    hooks.install()
    try:
        batch = torch.zeros(16, 3, 8, 8)
        for _ in range(3):
            batch.to("meta")
            tracker.grads_accumulated()
            tracker.optimizer_pre(1)
            owned = tracker.enter("optimizer")
            tracker.exit(owned)
            tracker.optimizer_post(1)
        tracker.finish()
    finally:
        hooks.uninstall()
    assert [s.h2d_bytes for s in tracker.steps] == [batch.numel() * 4] * 3
    stat = next(iter(hooks.copies.values()))
    assert (stat.direction, stat.count, stat.nbytes) == ("h2d", 3, 3 * batch.numel() * 4)
