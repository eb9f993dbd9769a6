"""Which SDPA kernel ran on a GPU, and why the math path was taken (reasons only a GPU shows)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import stave
from stave.doctor.diagnosis import diagnose_records
from stave.diagnose.rules.attention import sdpa_backend

pytestmark = pytest.mark.cuda


class Attn(nn.Module):
    def __init__(self, head_dim: int, dtype: torch.dtype, masked: bool) -> None:
        super().__init__()
        self.qkv = nn.Linear(4 * head_dim, 12 * head_dim, dtype=dtype)
        self.head_dim, self.masked = head_dim, masked

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 4, self.head_dim).permute(2, 0, 3, 1, 4)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril() if self.masked else None
        y = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=not self.masked)
        return y.float().pow(2).mean()


def run(head_dim: int, dtype: torch.dtype, masked: bool, autocast: bool):
    model = Attn(head_dim, dtype, masked).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with stave.watch(warmup=3, probes=False) as watch:
        for _ in range(5):
            x = torch.randn(4, 256, 4 * head_dim, device="cuda", dtype=dtype)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                loss = model(x)
            loss.backward()
            opt.step()
    return watch.record


def test_bf16_causal_runs_flash():
    cfg = run(64, torch.float32, masked=False, autocast=True).config
    assert sdpa_backend(cfg.sdpa_kernels, cfg.sdpa_calls) == "flash"
    assert cfg.sdpa_inputs["dtype"] == "bfloat16"


def test_fp32_with_mask_is_not_flash_and_says_why():
    cfg = run(64, torch.float32, masked=True, autocast=False).config
    assert sdpa_backend(cfg.sdpa_kernels, cfg.sdpa_calls) in ("memory_efficient", "cudnn", "math")
    assert cfg.sdpa_inputs["attn_mask"] == "bool" and cfg.sdpa_inputs["dtype"] == "float32"


def test_float64_takes_the_math_path_and_the_finding_names_the_dtype():
    rec = run(64, torch.float64, masked=False, autocast=False)
    assert sdpa_backend(rec.config.sdpa_kernels, rec.config.sdpa_calls) == "math"
    slow = [f for f in diagnose_records([rec]).findings if f.id == "ATTENTION_SLOW_KERNEL"]
    assert slow and "float64" in slow[0].title
