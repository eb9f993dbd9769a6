"""``optimizer.step(closure)`` (LBFGS; Lightning's automatic optimization): the model's time inside the
step is measured as forward and backward, not as optimizer."""

from __future__ import annotations

import torch
from torch import nn

import stave


def test_lbfgs_closure_phases() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 1))
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=3)
    x, y = torch.randn(256, 64), torch.randn(256, 1)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    with stave.watch(warmup=0, probes=False) as run:
        for _ in range(4):
            opt.step(closure)
    assert run.record is not None
    steps = run.record.steps
    assert len(steps) == 4
    for s in steps:
        # LBFGS evaluates the closure at least once per step (up to max_iter + its line search).
        assert s.forward_calls >= 1 and s.backward_calls == s.forward_calls
        assert s.forward_ns > 0 and s.backward_ns > 0 and s.optimizer_ns > 0
        parts = s.data_wait_ns + s.h2d_ns + s.forward_ns + s.backward_ns + s.optimizer_ns
        assert parts <= s.duration_ns
