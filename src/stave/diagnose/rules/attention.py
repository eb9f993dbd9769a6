"""ATTENTION_EAGER and ATTENTION_SLOW_KERNEL: attention runs on a slow path.

``scaled_dot_product_attention`` picks a kernel per call: flash (fp16/bf16, head dim up to 256, no
arbitrary mask), memory-efficient (also fp32 and additive masks), cuDNN, or the math path (the
unfused matmul-softmax-matmul that materializes the full score matrix). The op counter reads which
kernel ran; the first call's inputs say why a slower one was chosen. Hugging Face models loaded
with ``attn_implementation="eager"`` skip SDPA altogether and always take the unfused path.

The fused kernels' gain depends on sequence length, head size and device. For eager attention a
probe (monitor/attention_probe.py) times one call both ways at the run's own shape after the run;
the saving is that difference times the calls per step (layers x forwards), and where SDPA is not
faster there is no finding. Without the probe (and for the math-path finding), the estimate
applies a conservative :data:`FUSED_ATTENTION_SPEEDUP` to attention's counted FLOP share.
"""

from __future__ import annotations

from stave.analyze.step_model import phase_s
from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.inputs import DoctorInput
from stave.diagnose.rules._helpers import REPORT_MIN_SPEEDUP, is_gpu, make_finding, saving_speedup, spread_saving
from stave.diagnose.rules.padding import TOKEN_PHASES, attention_share

# The fused kernels avoid writing and re-reading the LxL score matrix; FlashAttention's paper
# reports 2-4x over the unfused path for the attention itself: the low end of that is used.
FUSED_ATTENTION_SPEEDUP = 2.0
# Attention under this share of the counted FLOPs is not worth a finding (short sequences).
MIN_ATTENTION_SHARE = 0.05
# Head dimensions the flash kernel takes on CUDA.
FLASH_MAX_HEAD_DIM = 256
FLASH_DTYPES = ("float16", "bfloat16")


def sdpa_backend(kernels: dict[str, int], calls: int) -> str | None:
    """Which SDPA kernel ran: "flash", "memory_efficient", "cudnn", "math", or None (no SDPA seen)."""
    names = " ".join(kernels)
    for marker, backend in (("flash", "flash"), ("efficient", "memory_efficient"), ("cudnn", "cudnn")):
        if marker in names:
            return backend
    return "math" if calls > 0 else None


def slow_kernel_reasons(inputs: dict[str, str]) -> list[str]:
    """Why flash attention could not run on CUDA for these inputs (empty when nothing rules it out)."""
    reasons = []
    dtype = inputs.get("dtype")
    if dtype and dtype not in FLASH_DTYPES:
        reasons.append(f"{dtype} inputs (flash runs fp16/bf16 only: use autocast)")
    if inputs.get("attn_mask", "none") != "none":
        reasons.append("an explicit attn_mask (flash takes none: use is_causal=True for causal masks)")
    head_dim = inputs.get("head_dim", "")
    if head_dim.isdigit():
        d = int(head_dim)
        if d > FLASH_MAX_HEAD_DIM:
            reasons.append(f"head dim {d} > {FLASH_MAX_HEAD_DIM}")
        elif d % 8:
            reasons.append(f"head dim {d} is not a multiple of 8")
    return reasons


def fused_attention_saving_s(fwd_bwd_s: float, attn_share: float) -> float:
    """Seconds a step saves with attention's share of forward+backward running
    :data:`FUSED_ATTENTION_SPEEDUP` faster."""
    return fwd_bwd_s * attn_share * (1.0 - 1.0 / FUSED_ATTENTION_SPEEDUP)


def _estimate(inp: DoctorInput) -> tuple[float, float, float]:
    t = inp.summary.step_time_median_s
    fwd_bwd = sum(phase_s(inp.summary, p) for p in TOKEN_PHASES)
    share = attention_share(inp)
    saved = fused_attention_saving_s(fwd_bwd, share)
    return saving_speedup(inp, spread_saving(inp, TOKEN_PHASES, saved), t), share, fwd_bwd


def probed_attention_saving_s(eager_s: float, sdpa_s: float, calls_per_step: float, fwd_bwd_s: float) -> float:
    """Seconds a step saves with SDPA: the probed per-call difference times the step's attention
    calls, never more than the forward and backward there are."""
    return min(max(0.0, eager_s - sdpa_s) * calls_per_step, fwd_bwd_s)


@rule("ATTENTION_EAGER", kind="doctor")
def attention_eager(inp: DoctorInput) -> Finding | None:
    """A Hugging Face model runs its eager attention where SDPA would serve."""
    record = inp.record
    cfg, probes = record.config, record.probes
    if inp.summary.steps == 0 or cfg.attn_implementation != "eager":
        return None
    t = inp.summary.step_time_median_s
    fwd_bwd = sum(phase_s(inp.summary, p) for p in TOKEN_PHASES)
    share = attention_share(inp)
    evidence = {"attn_implementation": cfg.attn_implementation, "attention_share_of_flops": share,
                "forward_backward_s": fwd_bwd, "attention_geometry": cfg.attention_geometry}
    if probes.attention_eager_s is not None and probes.attention_sdpa_s is not None and cfg.attention_geometry:
        calls = cfg.attention_geometry[0] * (cfg.forward_calls_per_step or 1.0)
        saved = probed_attention_saving_s(probes.attention_eager_s, probes.attention_sdpa_s, calls, fwd_bwd)
        est = saving_speedup(inp, spread_saving(inp, TOKEN_PHASES, saved), t)
        ratio = probes.attention_eager_s / probes.attention_sdpa_s if probes.attention_sdpa_s > 0 else None
        evidence.update({"probe_eager_s_per_call": probes.attention_eager_s, "probe_sdpa_s_per_call": probes.attention_sdpa_s,
                         "probe_shape": probes.attention_probe, "attention_calls_per_step": calls,
                         "saved_s_per_step": saved, "probe_fresh_page_share": probes.attention_fresh_share,
                         "minor_faults_per_step": cfg.minor_faults_per_step})
        how = (f"SDPA measured {ratio:.2f}x faster per call here at [batch, heads, seq, head_dim] = "
               f"{probes.attention_probe}" if ratio else "")
        explanation = ("Estimate: the probe's eager-minus-SDPA seconds for one attention call (forward and "
                       "backward, the run's shape and dtype, this machine) times the step's attention calls.")
    else:
        if share < MIN_ATTENTION_SHARE:
            return None
        est, share, fwd_bwd = _estimate(inp)
        evidence["assumed_fused_speedup"] = FUSED_ATTENTION_SPEEDUP
        how = f"{share:.0%} of its FLOPs"
        explanation = (f"Estimate (no probe): attention's counted FLOP share of forward+backward runs "
                       f"{FUSED_ATTENTION_SPEEDUP:g}x faster (the low end of what the fused kernels report).")
    if est < REPORT_MIN_SPEEDUP:
        return None  # SDPA is not faster here (short sequences, this device): nothing to gain
    return make_finding(
        "ATTENTION_EAGER",
        est,
        f"the model's attention runs eagerly (attn_implementation=\"eager\"): {how}",
        evidence,
        'model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")  # or from_pretrained(..., attn_implementation="sdpa")',
        explanation=explanation,
    )


@rule("ATTENTION_SLOW_KERNEL", kind="doctor")
def attention_slow_kernel(inp: DoctorInput) -> Finding | None:
    """On a GPU, scaled_dot_product_attention fell back to the math path, and the inputs say why."""
    record = inp.record
    cfg = record.config
    if inp.summary.steps == 0 or not is_gpu(record) or not cfg.sdpa_calls:
        return None
    backend = sdpa_backend(cfg.sdpa_kernels, cfg.sdpa_calls)
    if backend != "math" or not cfg.sdpa_kernels and not cfg.flops_by_phase:
        return None
    reasons = slow_kernel_reasons(cfg.sdpa_inputs)
    est, share, fwd_bwd = _estimate(inp)
    if share < MIN_ATTENTION_SHARE:
        return None
    why = "; ".join(reasons) if reasons else "the inputs do not say why"
    return make_finding(
        "ATTENTION_SLOW_KERNEL",
        est,
        f"scaled_dot_product_attention runs the unfused math kernel: {why}",
        {"sdpa_backend": backend, "sdpa_inputs": cfg.sdpa_inputs, "sdpa_calls": cfg.sdpa_calls,
         "attention_share_of_flops": share, "forward_backward_s": fwd_bwd, "reasons": reasons,
         "assumed_fused_speedup": FUSED_ATTENTION_SPEEDUP},
        """with torch.autocast("cuda", dtype=torch.bfloat16):      # flash needs fp16/bf16
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # not attn_mask=causal_mask""",
        explanation=(
            f"Estimate: attention's counted FLOP share of forward+backward runs {FUSED_ATTENTION_SPEEDUP:g}x "
            "faster on a fused kernel."
        ),
    )
