"""The attention probe: eager and SDPA attention timed at a given shape, the same result both ways."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from stave.capture.config_probe import attention_geometry
from stave.monitor import attention_probe
from stave.monitor.attention_probe import eager_attention, probe_attention


def test_eager_path_computes_what_sdpa_computes():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 16, 8, generator=gen) for _ in range(3))
    for causal in (True, False):
        assert torch.allclose(eager_attention(q, k, v, causal), F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                              atol=1e-5)


def test_probe_times_both_sides_and_shrinks_a_batch_too_large(monkeypatch):
    state = torch.random.get_rng_state()
    times = probe_attention(4, 2, 32, 8, causal=True)
    assert times is not None and times.eager_s > 0 and times.sdpa_s > 0
    assert times.shape == (4, 2, 32, 8) and times.batch_scale == 1.0
    assert torch.equal(state, torch.random.get_rng_state())
    monkeypatch.setattr(attention_probe, "MAX_PROBE_BYTES", 2 * 2 * (7 * 32 * 8 * 4 + 4 * 32 * 32 * 4))
    small = probe_attention(4, 2, 32, 8, causal=False)
    assert small.shape[0] == 2 and small.batch_scale == 2.0
    one_head = 7 * 32 * 8 * 4 + 4 * 32 * 32 * 4
    monkeypatch.setattr(attention_probe, "MAX_PROBE_BYTES", one_head)  # one row of one head fits
    fewer = probe_attention(4, 2, 32, 8, causal=False)
    assert fewer.shape == (1, 1, 32, 8) and fewer.batch_scale == 8.0
    monkeypatch.setattr(attention_probe, "MAX_PROBE_BYTES", one_head - 1)
    assert probe_attention(4, 2, 32, 8, causal=False) is None
    assert probe_attention(0, 2, 32, 8, causal=False) is None


def test_geometry_from_hf_style_configs():
    llama = type("C", (), {"num_hidden_layers": 4, "num_attention_heads": 8, "hidden_size": 512})()
    assert attention_geometry(llama, "LlamaForCausalLM") == [4, 8, 64, 1]
    gpt2 = type("C", (), {"n_layer": 2, "n_head": 4, "n_embd": 128})()
    assert attention_geometry(gpt2, "GPT2LMHeadModel") == [2, 4, 32, 1]
    bert = type("C", (), {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 128, "is_decoder": False})()
    assert attention_geometry(bert, "BertForSequenceClassification") == [2, 4, 32, 0]
    assert attention_geometry(object(), "Thing") == []


def test_a_lucky_round_is_no_gain_and_the_mask_follows_the_parameters(monkeypatch):
    """Paired rounds: SDPA faster in one lucky round only is reported as no gain (sdpa_s == eager_s);
    the eager side builds its causal mask in ``mask_dtype`` (transformers: the parameters' float32)."""
    seen_masks: list[torch.dtype] = []
    real_eager = attention_probe.eager_attention

    def spy(q, k, v, causal, mask_dtype=None):
        seen_masks.append(mask_dtype)
        return real_eager(q, k, v, causal, mask_dtype)

    rounds = iter([0.0] * 2 + [1.0, 0.4] + [1.0, 1.0] * 20)  # warm-up pair, one lucky round, then even

    monkeypatch.setattr(attention_probe, "eager_attention", spy)
    monkeypatch.setattr(attention_probe, "_call_s", lambda fn, q, k, v, device, *rest: (fn(q, k, v), next(rounds))[1])
    times = probe_attention(1, 2, 16, 8, causal=True, dtype=torch.bfloat16, mask_dtype=torch.float32)
    assert times is not None and times.sdpa_s == times.eager_s
    assert seen_masks and set(seen_masks) == {torch.float32}
    # A bf16 mask is what the scores' dtype gives without one.
    q = torch.randn(1, 1, 4, 2, dtype=torch.bfloat16)
    assert real_eager(q, q, q, True, torch.float32).dtype == torch.bfloat16


def test_fresh_pages_share_follows_the_runs_faults():
    """The run's faults per attention call place it between the warm and the fresh probe."""
    from stave.monitor.attention_probe import AttentionTimes, blended, fresh_share

    warm = AttentionTimes(0.010, 0.007, (1, 4, 1024, 32), 1.0, eager_faults=100.0)
    fresh = AttentionTimes(0.020, 0.008, (1, 4, 1024, 32), 1.0, eager_faults=24100.0)
    # 4 calls a step; 24,400 pages a step is 6,100 a call: a quarter of the way from warm to fresh.
    share = fresh_share(warm, fresh, 24_400.0, 4.0)
    assert abs(share - 0.25) < 1e-9
    mixed = blended(warm, fresh, share)
    assert abs(mixed.eager_s - 0.0125) < 1e-12 and abs(mixed.sdpa_s - 0.00725) < 1e-12
    # More faults than every call on fresh pages would take: capped at fresh; none counted: warm.
    assert fresh_share(warm, fresh, 10**9, 4.0) == 1.0
    assert fresh_share(warm, fresh, None, 4.0) == 0.0
    assert fresh_share(warm, AttentionTimes(0.02, 0.008, (1, 4, 1024, 32), 1.0, None), 24_400.0, 4.0) == 0.0
    # A probe that ran on fewer heads counts its faults for the run's: scaled by batch_scale.
    half = AttentionTimes(0.010, 0.007, (1, 2, 1024, 32), 2.0, eager_faults=50.0)
    half_fresh = AttentionTimes(0.020, 0.008, (1, 2, 1024, 32), 2.0, eager_faults=12050.0)
    assert abs(fresh_share(half, half_fresh, 24_400.0, 4.0) - 0.25) < 1e-9


def test_fresh_pages_cost_more_faults_than_a_warm_heap():
    """On glibc, a call on fresh pages faults in its temporaries; on the same heap warm it does not."""
    from stave.monitor import attention_probe as ap
    from stave.monitor.procfs import minor_faults

    if ap._TRIM is None or minor_faults() is None:
        pytest.skip("needs glibc's malloc_trim and /proc")
    warm = probe_attention(1, 2, 512, 32, causal=True)
    fresh = probe_attention(1, 2, 512, 32, causal=True, fresh_pages=True)
    assert warm is not None and fresh is not None
    assert fresh.eager_faults is not None and warm.eager_faults is not None
    # Two fp32 [2, 512, 512] score matrices alone are 1 MiB (256 pages).
    assert fresh.eager_faults > warm.eager_faults + 256
