"""Evaluation between optimizer steps is its own time; training forwards give samples and tokens."""

from __future__ import annotations

from collections import UserDict

import pytest
import torch
from torch import nn

import stave
from stave.analyze.breakdown import summarize_steps
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


class NanoGPTish(nn.Module):
    """forward(idx, targets) over integer tensors sliced by the loop itself (no DataLoader)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(64, 32)
        self.qkv = nn.Linear(32, 96)
        self.head = nn.Linear(32, 64)

    def forward(self, idx, targets=None):
        b, t = idx.shape
        q, k, v = self.qkv(self.emb(idx)).view(b, t, 3, 2, 16).permute(2, 0, 3, 1, 4)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        logits = self.head(y.transpose(1, 2).reshape(b, t, 32))
        return nn.functional.cross_entropy(logits.view(-1, 64), targets.view(-1))


def test_self_sliced_integer_batches_give_samples_tokens_and_the_sdpa_kernel():
    torch.manual_seed(0)
    data = torch.randint(0, 64, (4096,))
    model = NanoGPTish()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with stave.watch(warmup=3, probes=False) as run:
        for _ in range(6):
            ix = torch.randint(0, len(data) - 33, (8,))
            x = torch.stack([data[i:i + 32] for i in ix])
            y = torch.stack([data[i + 1:i + 33] for i in ix])
            model(x, y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    rec = run.record
    for s in rec.counted_steps():
        assert (s.samples, s.tokens, s.real_tokens) == (8, 256, 256)
    # tokens/s without a DataLoader: the tokens the model consumed over the counted steps' time
    summary = summarize_steps(rec.steps)
    wall_s = sum(s.duration_ns for s in rec.counted_steps()) / 1e9
    assert summary.tokens_per_s == pytest.approx(256 * len(rec.counted_steps()) / wall_s, rel=1e-6)
    assert summary.real_tokens_per_s == summary.tokens_per_s  # random ids: no token taken for padding
    assert rec.config.pad_token_id is None
    cfg = rec.config
    assert cfg.sdpa_calls == 6
    assert cfg.sdpa_inputs["is_causal"] == "True" and cfg.sdpa_inputs["attn_mask"] == "none"
    assert any("flash" in k for k in cfg.sdpa_kernels), cfg.sdpa_kernels  # the CPU flash kernel
    assert cfg.attention_flops_by_phase["forward"] == 2 * 8 * 2 * 32 * 32 * (16 + 16)


class SeqFirstLM(nn.Module):
    """pytorch/examples' word language model in small: ids are (positions, rows), batch_first off."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 8)
        self.rnn = nn.LSTM(8, 8)
        self.head = nn.Linear(8, 50)

    def forward(self, ids, hidden=None):
        out, _ = self.rnn(self.emb(ids), hidden)
        return self.head(out)


def test_a_hand_written_update_of_a_sequence_first_model_counts_steps_rows_and_tokens():
    from stave.capture.batch_walk import seq_first

    torch.manual_seed(0)
    model = SeqFirstLM()
    assert seq_first(model) and not seq_first(nn.LSTM(4, 4, batch_first=True)) and not seq_first(TinyLM())
    with stave.watch(warmup=0, probes=False) as run:
        for _ in range(5):
            model.zero_grad()
            ids = torch.randint(0, 50, (35, 4))  # 35 positions of 4 rows
            nn.functional.cross_entropy(model(ids).view(-1, 50), ids.view(-1)).backward()
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-0.1)
        model.zero_grad()
    steps = run.record.steps
    assert len(steps) == 5
    assert all(s.backward_calls == 1 for s in steps)
    # The model's inputs are counted from its second training forward (the hook goes on at the first).
    assert all(s.samples == 4 and s.tokens == 140 for s in steps[1:])
    assert any("parameters updated by hand" in n for n in run.record.notes)


def test_a_generator_run_under_no_grad_in_train_mode_feeds_training_not_evaluation():
    # WGAN-GP style: the critic trains on fakes the (trained) generator makes under no_grad; the
    # generator is never switched to eval(), so its forward and the batch fetched before it are training.
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    gen_net, critic = nn.Linear(8, 16), nn.Linear(16, 1)
    opt_g = torch.optim.SGD(gen_net.parameters(), lr=0.01)
    opt_d = torch.optim.SGD(critic.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(64, 16)), batch_size=8)
    with stave.watch(warmup=0, probes=False) as run:
        for real, in loader:
            with torch.no_grad():
                fake = gen_net(torch.randn(8, 8))
            opt_d.zero_grad()
            (critic(fake).mean() - critic(real).mean()).backward()
            opt_d.step()
            opt_g.zero_grad()
            (-critic(gen_net(torch.randn(8, 8))).mean()).backward()
            opt_g.step()
    steps = run.record.steps
    assert len(steps) == 8
    assert all(s.eval_ns == 0 and s.eval_forwards == 0 for s in steps)
    assert all(s.data_fetches == 1 and s.samples == 8 for s in steps[1:])
