"""The doctor's forward/backward/optimizer times agree with torch.profiler's spans of the same steps."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

import stave
from stave.capture import hooks_loop

pytestmark = pytest.mark.slow

# Both tools time the same calls with their own clocks; the profiler's range bookkeeping and our
# hooks sit at slightly different points of each call, so a small tolerance is needed.
TOLERANCE = 0.10
# The profiler's Optimizer.step span also contains the global optimizer hooks (the step boundary's
# bookkeeping runs in the post-hook), which our phase cannot include. Their cost varies with the
# machine's load (tens to hundreds of microseconds per step), so the test times them and takes
# them out of the profiler's span instead of allowing a fixed amount.


def _timed(method: Any, spent_ns: list[int]) -> Any:
    def wrapper(*args: Any) -> None:
        start = time.perf_counter_ns()
        try:
            method(*args)
        finally:
            spent_ns.append(time.perf_counter_ns() - start)

    return wrapper


def test_phases_agree_with_profiler(monkeypatch: pytest.MonkeyPatch) -> None:
    hook_ns: list[int] = []
    monkeypatch.setattr(hooks_loop.LoopHooks, "_opt_pre", _timed(hooks_loop.LoopHooks._opt_pre, hook_ns))
    monkeypatch.setattr(hooks_loop.LoopHooks, "_opt_post", _timed(hooks_loop.LoopHooks._opt_post, hook_ns))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 1024), nn.ReLU(),
                          nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    # A million parameters, so the optimizer's own work is milliseconds, well above the hooks'.
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(32, 3, 48, 48)
    y = torch.randint(0, 10, (32,))
    with stave.watch(warmup=0, probes=False) as run:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(8):
                with record_function("fwd"):
                    out = model(x)
                loss = nn.functional.cross_entropy(out, y)
                opt.zero_grad()
                with record_function("bwd"):
                    loss.backward()
                opt.step()
    assert run.record is not None
    steps = run.record.steps
    # The last step closes at its own optimizer.step(); all 8 are in the record.
    assert len(steps) == 8
    ours = {
        "forward": sum(s.forward_ns for s in steps) / 1e3,
        "backward": sum(s.backward_ns for s in steps) / 1e3,
        "optimizer": sum(s.optimizer_ns for s in steps) / 1e3,
    }
    totals = {e.key: e.cpu_time_total for e in prof.key_averages()}
    assert len(hook_ns) == 2 * len(steps)
    theirs = {
        "forward": totals["fwd"],
        "backward": totals["bwd"],
        "optimizer": totals["Optimizer.step#SGD.step"] + totals["Optimizer.zero_grad#SGD.zero_grad"]
        - sum(hook_ns) / 1e3,
    }
    for phase in ours:
        assert ours[phase] == pytest.approx(theirs[phase], rel=TOLERANCE), (phase, ours, theirs, sum(hook_ns) / 1e3)
