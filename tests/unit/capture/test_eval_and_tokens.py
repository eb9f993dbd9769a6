"""Evaluation between optimizer steps is its own time; training forwards give samples and tokens."""

from __future__ import annotations

from collections import UserDict

import torch
from torch import nn

import stave
from stave.capture.steps import eval_runs_of


def test_eval_runs_take_their_feeding_fetches_but_not_the_next_training_fetch():
    phases = ["data_wait", "forward", "backward", "optimizer",  # never: the step closes at optimizer
              "data_wait", "h2d", "eval", "data_wait", "eval", "data_wait", "forward", "backward"]
    assert eval_runs_of(phases) == [(4, 8)]
    assert eval_runs_of(["eval"]) == [(0, 0)]
    assert eval_runs_of(["data_wait", "forward", "backward"]) == []
    assert eval_runs_of(["eval", "forward", "data_wait", "eval"]) == [(0, 0), (2, 3)]


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(100, 16)
        self.head = nn.Linear(16, 100)

    def forward(self, input_ids, attention_mask=None):
        return self.head(self.emb(input_ids)).float().mean()


def test_watch_counts_tokens_and_keeps_evaluation_out_of_the_step():
    torch.manual_seed(0)
    model = TinyLM()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with stave.watch(warmup=0, probes=False) as run:
        for step in range(6):
            ids = torch.randint(0, 100, (4, 32))
            mask = torch.zeros(4, 32, dtype=torch.long)
            mask[:, :8] = 1
            mask[0, :] = 1
            model(**UserDict(input_ids=ids, attention_mask=mask)).backward()
            opt.step()
            opt.zero_grad()
            if step % 2 == 1:
                model.eval()
                with torch.no_grad():
                    for _ in range(3):
                        model(ids)
                model.train()
    steps = run.record.steps
    assert len(steps) == 6
    for s in steps[1:]:
        assert s.samples == 4 and s.forward_calls == 1
        assert s.tokens == 128 and s.real_tokens == 32 + 3 * 8
        assert s.longest_tokens == 128
    with_eval = [s for s in steps if s.eval_ns > 0]
    assert [s.index for s in with_eval] == [2, 4]
    for s in with_eval:
        assert s.eval_forwards == 3
        assert s.duration_ns == s.wall_ns - s.eval_ns
        parts = s.data_wait_ns + s.h2d_ns + s.forward_ns + s.backward_ns + s.optimizer_ns
        assert parts <= s.duration_ns


def test_frozen_teacher_under_no_grad_stays_training_work():
    student, teacher = nn.Linear(8, 4), nn.Linear(8, 4).eval()
    opt = torch.optim.SGD(student.parameters(), lr=0.01)
    with stave.watch(warmup=0, probes=False) as run:
        for _ in range(4):
            x = torch.randn(5, 8)
            with torch.no_grad():
                target = teacher(x)
            ((student(x) - target) ** 2).mean().backward()
            opt.step()
    assert all(s.eval_ns == 0 for s in run.record.steps)
    assert all(s.forward_calls == 2 for s in run.record.steps[1:])
