"""The report's language-model and framework lines: only what the run showed."""

from __future__ import annotations

from stave.report.doctor_wording import workload_lines


def test_tokens_eval_mfu_framework_attention():
    summary = {"tokens_per_s": 12_000.0, "tokens_per_step": 1024.0, "real_tokens_per_step": 256.0,
               "real_tokens_per_s": 3_000.0, "eval_share": 0.25, "eval_s": 0.5,
               "mfu": {"value": 0.123, "flops_per_step": 3e9, "peak_flops_per_s": 1e12, "peak_source": "x"}}
    config = {"framework": "hf_trainer", "framework_version": "5.23.0", "attn_implementation": "sdpa",
              "sdpa_kernels": {"scaled_dot_product_flash_attention_for_cpu": 2}}
    lines = workload_lines(summary, config)
    assert lines[0] == "12,000 tokens/s (1,024 per step) · 3,000 real tokens/s (75% padding)"
    assert lines[1].startswith("evaluation: 25% of the wall time")
    assert lines[2].startswith("MFU 12.3%")
    assert lines[3] == "framework: hf_trainer 5.23.0 (fixes use its switches)"
    assert "flash_attention_for_cpu" in lines[4]


def test_nothing_seen_nothing_said():
    assert workload_lines({"tokens_per_s": None, "eval_share": 0.0, "mfu": None}, {}) == []
    assert workload_lines({}, {"sdpa_calls": 3}) == ["attention: SDPA ran the math path"]
