"""Probe: eager attention against ``scaled_dot_product_attention`` at the run's own shapes, here.

Run after the script ends, only when a Hugging Face model ran ``attn_implementation="eager"``. One
attention call, forward and backward, both ways: the eager path as transformers writes it
(``q @ k^T`` scaled, an additive causal mask for a decoder, softmax in float32, ``@ v``) and the
fused SDPA call the ``"sdpa"`` implementation makes (``is_causal=True`` for a decoder, no mask
otherwise), in paired rounds (median ratio, sign test), on ``[batch, heads, seq, head_dim]``
tensors of the run's dtype, the mask in the parameters' dtype. Which SDPA kernel wins, and by how much, depends on the device, the sequence length
and the head size (on a CPU from about even at short sequences to several-fold at long ones), so
the saving is measured rather than assumed.
"""

from __future__ import annotations

import ctypes
import logging
import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from stave import device as dev
from stave.analyze.stats import paired_ratio
from stave.monitor.procfs import minor_faults

log = logging.getLogger(__name__)

# Rounds (each times both sides back to back, the order alternating) and calls per round. The
# ratio is the median of the rounds' ratios with a sign test (analyze.stats.paired_ratio); the
# best of three rounds per side, as before, read eager at 9.5 ms one run and 22 ms the next at the
# same shape on a 2-core Zen 4 VM, and the estimate with it.
ROUNDS = 9
MIN_ROUNDS = 5
CALLS_PER_ROUND = 2
# Wall-time budget: after MIN_ROUNDS rounds, no new round starts past it.
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
    # Minor page faults of one eager call at ``shape``, the median of the rounds (None: not counted).
    eager_faults: float | None = None


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                    mask_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Attention the way transformers' eager path computes it (the score matrix materialized).

    ``mask_dtype``: the dtype of the additive causal mask (default: the scores'). transformers builds
    it in the embeddings' dtype, the parameters' float32 under autocast: adding it promotes the
    bf16 scores to float32, and the softmax, its cast and the backward then run on float32
    ``[seq, seq]`` matrices (22 ms against 17 ms with a bf16 mask at [1, 4, 1024, 32] on a 2-core Zen 4).
    """
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if causal:
        seq = q.shape[-2]
        dtype = mask_dtype or scores.dtype
        mask = torch.full((seq, seq), torch.finfo(dtype).min, device=q.device, dtype=dtype).triu(1)
        scores = scores + mask
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return weights @ v


def _heap_trimmer():
    """glibc's ``malloc_trim`` (give the heap's free pages back to the OS), or None elsewhere."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


_TRIM = _heap_trimmer()


def _call_s(fn, q, k, v, device, fresh_pages: bool = False, faults: list[float] | None = None) -> float:
    """Seconds per call of ``fn`` forward and backward (``faults``: gets the call's page faults)."""
    dev.synchronize(device)
    faults_before = minor_faults() if faults is not None else None
    elapsed = 0.0
    start = time.perf_counter()
    for _ in range(CALLS_PER_ROUND):
        if fresh_pages and _TRIM is not None:
            # The run's steps touched fresh pages for their temporaries (its fault count says so):
            # hand the freed heap back, as the run's allocator did between steps, so this call
            # faults its temporaries in too. The trim itself is left out of the time.
            elapsed += time.perf_counter() - start
            _TRIM(0)
            start = time.perf_counter()
        fn(q, k, v).sum().backward()
    dev.synchronize(device)
    elapsed += time.perf_counter() - start
    faults_after = minor_faults() if faults is not None else None
    if faults is not None and faults_before is not None and faults_after is not None:
        faults.append((faults_after - faults_before) / CALLS_PER_ROUND)
    return elapsed / CALLS_PER_ROUND


def probe_attention(batch: int, heads: int, seq: int, head_dim: int, causal: bool,
                    dtype: torch.dtype = torch.float32, device: "torch.device | str" = "cpu",
                    mask_dtype: torch.dtype | None = None, fresh_pages: bool = False) -> AttentionTimes | None:
    """Time one eager and one SDPA attention call (forward + backward) at this shape (None: cannot).

    ``fresh_pages``: each call starts with the heap's free pages returned to the OS, so that its
    temporaries fault in (see :func:`stave.monitor.procfs.minor_faults`), and its faults are counted;
    eager attention's materialized ``[seq, seq]`` matrices cost about twice as much that way on a
    CPU (10 against 21 ms at [1, 4, 1024, 32] bf16 on a 2-core Zen 4; SDPA's 7.5 ms hardly changes).

    ``mask_dtype``: the eager path's causal-mask dtype (the model parameters'; see
    :func:`eager_attention`). ``sdpa_s`` is ``eager_s`` over the paired ratio, so a gain the rounds
    do not show significantly is reported as none (``sdpa_s == eager_s``).
    """
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
        "eager": lambda a, b, c: eager_attention(a, b, c, causal, mask_dtype),
        "sdpa": lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=causal),
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    eager_faults: list[float] = []
    names = list(sides)
    try:
        for fn in sides.values():
            _call_s(fn, q, k, v, device, fresh_pages)  # warm-up: allocations and kernel choice
        start = time.perf_counter()
        for r in range(ROUNDS):
            for name in names[r % 2:] + names[:r % 2]:  # neither always goes first
                times[name].append(_call_s(sides[name], q, k, v, device, fresh_pages,
                                           eager_faults if name == "eager" else None))
            if r + 1 >= MIN_ROUNDS and time.perf_counter() - start > BUDGET_S:
                break
    except (RuntimeError, ValueError) as exc:
        # A dtype or shape this build's kernels do not take: nothing measured.
        log.debug("attention probe skipped: %s", exc)
        return None
    eager_s = statistics.median(times["eager"])
    ratio = paired_ratio(times["eager"], times["sdpa"])
    return AttentionTimes(eager_s, eager_s / ratio, (rows, probe_heads, seq, head_dim),
                          batch * heads / (rows * probe_heads),
                          statistics.median(eager_faults) if eager_faults else None)


def fresh_share(warm: AttentionTimes, fresh: AttentionTimes, run_faults_per_step: float | None,
                calls_per_step: float) -> float:
    """Where the run's eager calls sat between the two probes, by page faults, 0 (``warm``) to 1.

    ``fresh`` timed each call on fresh pages, ``warm`` on whatever the heap held; both counted an
    eager call's faults. The run faulted ``run_faults_per_step`` pages per step in all: taking them
    all to be attention's is the most its calls can have faulted (the rest of the step allocates
    too), never more than every call on fresh pages.
    """
    if (run_faults_per_step is None or fresh.eager_faults is None or warm.eager_faults is None
            or calls_per_step <= 0):
        return 0.0
    scale = fresh.batch_scale
    span = (fresh.eager_faults - warm.eager_faults) * scale
    if span <= 0:
        return 0.0
    per_call = run_faults_per_step / calls_per_step
    return min(1.0, max(0.0, (per_call - warm.eager_faults * scale) / span))


def blended(warm: AttentionTimes, fresh: AttentionTimes, share: float) -> AttentionTimes:
    """Each side's seconds per call with ``share`` of its calls' temporaries on fresh pages."""
    def mix(w: float, f: float) -> float:
        return w + share * (f - w)
    return AttentionTimes(mix(warm.eager_s, fresh.eager_s), mix(warm.sdpa_s, fresh.sdpa_s), warm.shape,
                          warm.batch_scale, fresh.eager_faults)
