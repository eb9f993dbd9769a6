"""PADDING_WASTE: a share of the model's compute goes to padding tokens.

Batches of text padded to a fixed length (``padding="max_length"``) or mixing short and long
samples spend forward and backward on positions the attention mask then ignores. The linear
layers cost per position, attention per pair of positions in a row, so the padding's share of the
compute is ``(1 - q) x padded/fed tokens + q x padded/fed squared row lengths`` with ``q``
attention's share of the counted step's op time (CPU), else of its counted FLOPs. The estimate
removes that share of the measured forward and backward time (per-token cost measured, not assumed).
"""

from __future__ import annotations

from dataclasses import dataclass

from stave.analyze.step_model import phase_s
from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.inputs import DoctorInput
from stave.diagnose.rules._helpers import REPORT_MIN_SPEEDUP, is_gpu, make_finding, saving_speedup, spread_saving

# Under a tenth of the fed tokens as padding is what pad-to-longest with mixed lengths leaves
# anyway; removing the rest needs packing, which changes the data path for little gain.
MIN_PAD_SHARE = 0.10
# Pad-to-longest alone is the fix when its speedup is at least this share of what removing all
# padding would give: it is a one-line change, grouping by length also changes the sample order.
# Compared as speedups, the step after each fix, not as shares of the compute saved: with attention's
# squared rows most of the cost, pad-to-longest saved 81% and grouping 94% of a BERT's compute
# (hf_padding_maxlen, 512 tokens), which is 5x against 17x.
LONGEST_ENOUGH = 0.8
# Attention kernels that take packed rows (position ids / cu_seqlens) without cross-row attention:
# where DataCollatorWithFlattening removes padding entirely.
PACKING_ATTENTION = ("flash_attention_2", "flash_attention_3", "flex_attention")
# The phases whose work grows with the tokens fed.
TOKEN_PHASES = ("forward", "backward")
# Steps whose token counts vary by at least this coefficient of variation (dynamic padding) let the
# per-token cost be fitted from the steps themselves; below it the fit is noise.
MIN_TOKEN_CV = 0.10
# A fit needs this many steps to say anything.
MIN_FIT_STEPS = 8


@dataclass(frozen=True)
class TokenSums:
    """Token sums over the counted steps (see ``StepRecord``): fed, real, had each batch been
    padded to its longest row, and the matching sums of squared row lengths."""

    tokens: int
    real: int
    longest: int
    sq: int
    real_sq: int
    longest_sq: int


def compute_share_left(sums: TokenSums, attention_share: float, tokens: int, sq: int) -> float:
    """Share of the fed batch's token compute left when ``tokens`` / ``sq`` are fed instead."""
    q = min(max(attention_share, 0.0), 1.0)
    linear = tokens / sums.tokens if sums.tokens else 1.0
    quadratic = sq / sums.sq if sums.sq else linear
    return (1.0 - q) * linear + q * quadratic


def padding_saving_s(token_compute_s: float, share_left: float) -> float:
    """Seconds a step saves when the token-bound compute shrinks to ``share_left`` of itself."""
    return token_compute_s * (1.0 - share_left)


def _sums(inp: DoctorInput) -> TokenSums:
    steps = inp.record.counted_steps()
    return TokenSums(
        tokens=sum(s.tokens for s in steps),
        real=sum(s.real_tokens for s in steps),
        longest=sum(s.longest_tokens for s in steps),
        sq=sum(s.token_sq for s in steps),
        real_sq=sum(s.real_token_sq for s in steps),
        longest_sq=sum(s.longest_token_sq for s in steps),
    )


def attention_share(inp: DoctorInput) -> float:
    """Attention's share of the counted forward+backward FLOPs (0 when not counted)."""
    cfg = inp.record.config
    total = sum(cfg.flops_by_phase.get(p, 0) for p in TOKEN_PHASES)
    attn = sum(cfg.attention_flops_by_phase.get(p, 0) for p in TOKEN_PHASES)
    return attn / total if total else 0.0


def attention_time_share(inp: DoctorInput) -> float | None:
    """Attention's share of the counted step's forward+backward op time (CPU runs, where each op
    was timed); None without those timings. Attention's FLOPs run slower than the linear layers'
    (smaller products per head, and the softmax, mask and dropout over the squared rows count no
    FLOPs), so its share of the time is the share of the cost that grows with the rows squared."""
    cfg = inp.record.config
    total = sum(sum(cfg.op_s_by_phase.get(p, {}).values()) for p in TOKEN_PHASES)
    attn = sum(cfg.attention_op_s_by_phase.get(p, 0.0) for p in TOKEN_PHASES)
    if total <= 0 or not cfg.attention_op_s_by_phase:
        return None
    return min(1.0, attn / total)


def fitted_token_s(tokens: list[int], compute_s: list[float]) -> float | None:
    """Seconds per token from a least-squares line of per-step compute against tokens fed.

    None when the steps do not vary enough in tokens (fixed-length padding) or the slope is not
    positive: then there is nothing to fit, and the whole compute is taken to scale with tokens.
    """
    n = len(tokens)
    if n < MIN_FIT_STEPS:
        return None
    mean_t = sum(tokens) / n
    mean_c = sum(compute_s) / n
    var = sum((t - mean_t) ** 2 for t in tokens) / n
    if mean_t <= 0 or var ** 0.5 / mean_t < MIN_TOKEN_CV:
        return None
    slope = sum((t - mean_t) * (c - mean_c) for t, c in zip(tokens, compute_s)) / n / var
    return slope if slope > 0 else None


def token_compute_s(inp: DoctorInput) -> float:
    """Forward+backward seconds of a median step that grow with the tokens.

    With token counts that vary from step to step, the measured per-token cost (a fitted slope)
    times the median step's tokens; otherwise the whole forward+backward less, on a CPU, the host's
    fixed per-op dispatch (on the timeline there, and it does not shrink with fewer tokens).
    """
    record, summary = inp.record, inp.summary
    fwd_bwd = sum(phase_s(summary, p) for p in TOKEN_PHASES)
    steps = record.counted_steps()
    per_token = fitted_token_s([s.tokens for s in steps], [(s.forward_ns + s.backward_ns) / 1e9 for s in steps])
    if per_token is not None:
        tokens = sorted(s.tokens for s in steps)[len(steps) // 2]
        return min(fwd_bwd, per_token * tokens)
    overhead = record.probes.op_overhead_ns
    ops = sum(record.config.aten_ops_by_phase.get(p, 0) for p in TOKEN_PHASES)
    if not is_gpu(record) and overhead and ops:
        fwd_bwd -= min(fwd_bwd, ops * overhead / 1e9)
    return fwd_bwd


@rule("PADDING_WASTE", kind="doctor")
def padding_waste(inp: DoctorInput) -> Finding | None:
    """Padding tokens take a large share of the model's forward and backward compute."""
    summary = inp.summary
    t = summary.step_time_median_s
    if summary.steps == 0 or t <= 0:
        return None
    sums = _sums(inp)
    if sums.tokens == 0 or sums.real >= sums.tokens:
        return None
    pad_share = 1.0 - sums.real / sums.tokens
    if pad_share < MIN_PAD_SHARE:
        return None
    q_flops = attention_share(inp)
    q_time = attention_time_share(inp)
    q = q_time if q_time is not None else q_flops
    compute_s = token_compute_s(inp)
    left_all = compute_share_left(sums, q, sums.real, sums.real_sq)
    left_longest = compute_share_left(sums, q, sums.longest, sums.longest_sq)
    saved_all = 1.0 - left_all
    saved_longest = 1.0 - left_longest
    after_longest = max(t - padding_saving_s(compute_s, left_longest), 1e-12)
    after_all = max(t - padding_saving_s(compute_s, left_all), 1e-12)
    strategy = "longest" if saved_all > 0 and after_all >= LONGEST_ENOUGH * after_longest else "group_by_length"
    attn = inp.record.config.attn_implementation
    packing = attn in PACKING_ATTENTION
    left = left_longest if strategy == "longest" else left_all
    est = saving_speedup(inp, spread_saving(inp, TOKEN_PHASES, padding_saving_s(compute_s, left)), t)
    if est < REPORT_MIN_SPEEDUP:
        return None
    evidence = {
        "step_time_s": t,
        "tokens_per_step": summary.tokens_per_step,
        "real_tokens_per_step": summary.real_tokens_per_step,
        "pad_share_of_tokens": pad_share,
        "pad_share_if_padded_to_longest": 1.0 - sums.real / sums.longest if sums.longest else None,
        "attention_share_of_flops": q_flops,
        "attention_share_of_time": q_time,
        "token_compute_s": compute_s,
        "compute_saved_share_pad_to_longest": saved_longest,
        "compute_saved_share_no_padding": saved_all,
        "fix_strategy": strategy,
        "attn_implementation": attn,
        "packing_supported": packing,
        # Without an attention mask: the pad id real tokens were counted with, and its evidence.
        "pad_token_id": inp.record.config.pad_token_id,
        "pad_token_source": inp.record.config.pad_token_source,
    }
    if strategy == "longest":
        fix = """# Pad each batch to its own longest sample, not to a fixed length:
tokenized = dataset.map(lambda b: tokenizer(b["text"], truncation=True), batched=True)  # no padding="max_length"
collate = DataCollatorWithPadding(tokenizer)   # pads per batch
loader = DataLoader(tokenized, batch_size=..., collate_fn=collate)"""
        how = "padding each batch only to its longest sample"
    else:
        fix = """# Batch samples of similar length together, then pad each batch to its longest:
#   sort indices by length in chunks of ~50 batches, shuffle the batches (a bucketing sampler)
collate = DataCollatorWithPadding(tokenizer)
loader = DataLoader(tokenized, batch_sampler=length_grouped_batches, collate_fn=collate)"""
        if packing:
            fix += """
# or pack samples into rows without padding (the attention kernel keeps them apart):
collate = DataCollatorWithFlattening()"""
        how = "grouping samples by length (an upper bound: a little padding stays)"
    return make_finding(
        "PADDING_WASTE",
        est,
        f"{pad_share:.0%} of the tokens fed to the model are padding; "
        f"{1.0 - left:.0%} of its forward/backward compute would go by {how}",
        evidence,
        fix,
        explanation=(
            "Estimate: the forward+backward time that grows with tokens shrinks by padding's share of "
            "the compute: linear layers by the padded share of tokens, attention (its share of the "
            "step's op time on a CPU, else of the counted FLOPs) by the padded share of squared row "
            "lengths."
        ),
    )
