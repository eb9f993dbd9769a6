"""Probe: eager attention against ``scaled_dot_product_attention`` at the run's own shapes, here.

Run after the script ends, only when a Hugging Face model ran ``attn_implementation="eager"``. One
attention call, forward and backward, both ways: the eager path as transformers writes it
(``q @ k^T`` scaled, an additive causal mask for a decoder, softmax in float32, ``@ v``) and the
fused SDPA call the ``"sdpa"`` implementation makes (``is_causal=True`` for a decoder, no mask
otherwise), interleaved, best of a few rounds, on ``[batch, heads, seq, head_dim]`` tensors of the
run's dtype. Which SDPA kernel wins, and by how much, depends on the device, the sequence length
and the head size (on a CPU from about even at short sequences to several-fold at long ones), so
the saving is measured rather than assumed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from stave import device as dev

log = logging.getLogger(__name__)

# Rounds per side (best kept: slower ones met interference) and calls per round.
ROUNDS = 3
CALLS_PER_ROUND = 2
# Wall-time budget: after the first round pair, no new round starts past it.
BUDGET_S = 2.0
# The probe's tensors (q, k, v, the scores and their gradients) may take this many bytes; larger
# shapes shrink the batch, then the heads (each row and head is an independent problem of the same
# cost, so the time scales back up by the share left out); a single head past it is not probed.
MAX_PROBE_BYTES = 512 * 1024 * 1024
_SEED = 20240603


@dataclass(frozen=True)
class AttentionTimes:
    """Seconds of one attention call, forward and backward, each way, at ``shape`` (batch and heads
    may be fewer than the run's: ``batch_scale`` is the run's batch x heads over the probe's)."""

    eager_s: float
    sdpa_s: float
    shape: tuple[int, int, int, int]
    batch_scale: float


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """Attention the way transformers' eager path computes it (the score matrix materialized)."""
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if causal:
        seq = q.shape[-2]
        mask = torch.full((seq, seq), torch.finfo(scores.dtype).min, device=q.device, dtype=scores.dtype).triu(1)
        scores = scores + mask
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return weights @ v


def _call_s(fn, q, k, v, device) -> float:
    dev.synchronize(device)
    start = time.perf_counter()
    for _ in range(CALLS_PER_ROUND):
        fn(q, k, v).sum().backward()
    dev.synchronize(device)
    return (time.perf_counter() - start) / CALLS_PER_ROUND


def probe_attention(batch: int, heads: int, seq: int, head_dim: int, causal: bool,
                    dtype: torch.dtype = torch.float32, device: "torch.device | str" = "cpu") -> AttentionTimes | None:
    """Time one eager and one SDPA attention call (forward + backward) at this shape (None: cannot)."""
    if min(batch, heads, seq, head_dim) < 1:
        return None
    device = dev.resolve_device(device)
    elem = torch.empty((), dtype=dtype).element_size()
    # q, k, v, their grads, the output, and (eager) scores, weights and their grads in float32
    per_head = 7 * seq * head_dim * elem + 4 * seq * seq * 4
    if per_head > MAX_PROBE_BYTES:
        return None
    probe_heads = min(heads, MAX_PROBE_BYTES // per_head)
    rows = max(1, min(batch, MAX_PROBE_BYTES // (probe_heads * per_head)))
    gen = torch.Generator(device=device).manual_seed(_SEED)
    q, k, v = (torch.randn(rows, probe_heads, seq, head_dim, generator=gen, device=device, dtype=dtype).requires_grad_()
               for _ in range(3))
    sides = {
        "eager": lambda a, b, c: eager_attention(a, b, c, causal),
        "sdpa": lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=causal),
    }
    best = {name: float("inf") for name in sides}
    try:
        for fn in sides.values():
            _call_s(fn, q, k, v, device)  # warm-up: allocations and kernel choice
        start = time.perf_counter()
        for _ in range(ROUNDS):
            for name, fn in sides.items():
                best[name] = min(best[name], _call_s(fn, q, k, v, device))
            if time.perf_counter() - start > BUDGET_S:
                break
    except (RuntimeError, ValueError) as exc:
        # A dtype or shape this build's kernels do not take: nothing measured.
        log.debug("attention probe skipped: %s", exc)
        return None
    return AttentionTimes(best["eager"], best["sdpa"], (rows, probe_heads, seq, head_dim),
                          batch * heads / (rows * probe_heads))
