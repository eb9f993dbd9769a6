"""Hugging Face models built from a config (no download): tokens, padding, attention, the Trainer.

Skipped without ``transformers`` (an optional test dependency: ``pip install stave[frameworks]``).
"""

from __future__ import annotations

import os
import tempfile

import pytest
import torch

import stave
from stave.doctor.diagnosis import diagnose_records
from stave.report.doctor_json import doctor_json, doctor_json_errors

transformers = pytest.importorskip("transformers", reason="transformers is not installed (optional: stave[frameworks])")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

WIDTH = 64


def tiny_gpt2(attn: str = "sdpa"):
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=128, n_positions=WIDTH, pad_token_id=0,
                                  bos_token_id=1, eos_token_id=1, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel._from_config(cfg, attn_implementation=attn)


def padded_rows(rows: int, lengths: list[int]) -> dict[str, torch.Tensor]:
    """Rows padded to WIDTH (padding="max_length"), real lengths as given."""
    ids = torch.zeros(rows, WIDTH, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(2, 128, (n,))
        mask[i, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


@pytest.mark.slow
def test_plain_loop_counts_tokens_real_tokens_and_the_sdpa_kernel():
    torch.manual_seed(0)
    model = tiny_gpt2()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    lengths = [8, 16, 12, 4]
    with stave.watch(warmup=3, probes=False) as run:
        for _ in range(6):
            batch = transformers.BatchEncoding(padded_rows(4, lengths))
            model(**batch).loss.backward()
            opt.step()
            opt.zero_grad()
    rec = run.record
    counted = rec.counted_steps()
    assert counted and all(s.samples == 4 and s.tokens == 4 * WIDTH and s.real_tokens == 40 for s in counted)
    assert all(s.longest_tokens == 4 * 16 for s in counted)
    cfg = rec.config
    assert cfg.attn_implementation == "sdpa"
    assert cfg.sdpa_calls >= 2 * 6
    assert cfg.sdpa_inputs["head_dim"] == "16"
    assert cfg.attention_flops_by_phase.get("forward", 0) > 0
    result = diagnose_records([rec])
    assert result.summary.real_tokens_per_s == pytest.approx(result.summary.tokens_per_s * 40 / 256, rel=1e-6)
    padding = [f for f in result.findings if f.id == "PADDING_WASTE"]
    assert padding and padding[0].evidence["fix_strategy"] == "longest"
    assert cfg.framework is None and "DataCollatorWithPadding" in padding[0].fix


def test_eager_attention_is_named():
    torch.manual_seed(0)
    model = tiny_gpt2("eager")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with stave.watch(warmup=3, probes=False) as run:  # the FLOP count runs on warm-up step 2
        for _ in range(5):
            model(**padded_rows(2, [WIDTH, WIDTH])).loss.backward()
            opt.step()
    cfg = run.record.config
    assert cfg.attn_implementation == "eager" and cfg.sdpa_calls == 0
    result = diagnose_records([run.record])
    ids = [f.id for f in result.findings]
    assert "ATTENTION_EAGER" in ids and "PADDING_WASTE" not in ids
    report = doctor_json(result)
    assert not doctor_json_errors(report)
    assert report["summary"]["tokens_per_step"] == 2 * WIDTH == report["summary"]["real_tokens_per_step"]
    assert report["config"]["attn_implementation"] == "eager"


def test_eager_attention_probe_runs_at_the_runs_own_shape():
    torch.manual_seed(0)
    model = tiny_gpt2("eager")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with stave.watch(warmup=3) as run:
        for _ in range(5):
            model(**padded_rows(2, [WIDTH, WIDTH])).loss.backward()
            opt.step()
    rec = run.record
    assert rec.config.attention_geometry == [2, 2, 16, 1]  # layers, heads, head_dim, causal
    assert rec.probes.attention_probe == [2, 2, WIDTH, 16]
    assert rec.probes.attention_eager_s > 0 and rec.probes.attention_sdpa_s > 0


@pytest.mark.slow
def test_trainer_batches_framework_and_padding_fix_in_its_words():
    torch.manual_seed(0)
    model = tiny_gpt2()
    lengths = torch.randint(4, 17, (64,)).tolist()
    data = [{"n": n} for n in lengths]

    def collate(rows):
        return transformers.BatchEncoding(padded_rows(len(rows), [r["n"] for r in rows]))

    args = transformers.TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=4, max_steps=8,
                                          gradient_accumulation_steps=2,
                                          report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True,
                                          logging_steps=1000, remove_unused_columns=False)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, data_collator=collate)
    with stave.watch(warmup=3, probes=False) as run:
        trainer.train()
    rec = run.record
    assert rec.config.framework == "hf_trainer"
    assert rec.config.framework_version == transformers.__version__
    result = diagnose_records([rec])
    # one optimizer step = both micro-batches of the accumulation
    assert result.summary.samples_per_step == pytest.approx(8)
    assert result.summary.tokens_per_step == pytest.approx(8 * WIDTH)
    assert all(s.forward_calls == 2 for s in rec.counted_steps())
    # The top finding about the job (on a shared machine MACHINE_BUSY may lead: it is about the machine).
    top = next(f for f in result.findings if f.id != "MACHINE_BUSY")
    assert top.id == "PADDING_WASTE"
    fields = {f.name for f in __import__("dataclasses").fields(transformers.TrainingArguments)}
    switch = 'train_sampling_strategy="group_by_length"' if "train_sampling_strategy" in fields else "group_by_length=True"
    assert switch in top.fix and "TrainingArguments" in top.fix
