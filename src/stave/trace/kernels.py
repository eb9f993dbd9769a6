"""What a GPU kernel is, from its name: communication or compute, matmul-like, tensor cores, precision.

Kernel names are the only description a trace carries, and they follow the libraries' naming:

* communication: NCCL/RCCL/HCCL kernels (``ncclDevKernel_AllReduce...``, ``ncclKernel_SendRecv...``)
  and custom all-reduce kernels;
* matmul-like (GEMM, convolution, attention), only with a library's mark (see ``_LIBRARY``): cuBLAS/cuBLASLt (``sgemm``, ``s16816gemm``, ``nvjet_*``),
  CUTLASS (``cutlass_80_tensorop_*``), cuDNN (``implicit_convolve``, ``xmma_fprop``), flash/efficient
  attention (``flash_fwd``, ``fmha``), Triton matmul templates (``triton_tem_*mm``), ROCm Tensile
  (``Cijk_*``) and MIOpen;
* tensor cores: MMA instruction families in the name (``hmma``, ``gmma``/``wgmma``, ``xmma``,
  ``tensorop``, cuBLAS tile names ``s16816``/``h1688``/``s884``, ``nvjet``, flash attention, Triton
  ``tl.dot`` matmuls, AMD matrix-core ``MI``/``mfma`` kernels);
* precision: fp16/bf16/fp8 markers (``Half``, ``BFloat16``, ``__half``, ``bf16``, ``f16``, ``e4m3``),
  TF32 (``tf32``, CUTLASS ``tensorop_s1688`` without a half marker) or plain fp32 (``sgemm``,
  ``<float``); cuBLAS's Hopper ``nvjet_sm90_<abc>_`` names carry the operand types as letters
  (``hsh`` fp16, ``tst`` bf16);
* no tensor cores whatever the family: scalar-FMA kernels (``ffma``, ``simt``) and anything fp32.

Classification runs once per distinct name, so its cost does not grow with the trace.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

COMPUTE, COMMUNICATION, MEMORY = "compute", "communication", "memory"

_COMM = re.compile(
    r"nccl|rccl|hccl|cross_device_reduce|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|sendrecv",
    re.IGNORECASE,
)
_MATMUL = re.compile(
    r"gemm|gemv|matmul|_mm_|_mm$|_bmm|addmm|hmma|gmma|xmma|imma|mfma|tensorop|cutlass|cublas|nvjet"
    r"|conv(?!ert)|winograd|dgrad|wgrad|fprop|flash|fmha|attention|Cijk_|miopen|igemm",
    re.IGNORECASE,
)
# A generic word ("gemm", "conv", "attention") is not evidence: FBGEMM's embedding and quantization
# kernels, Triton's fused pointwise kernels and vendors' own names contain them too. A name is a
# matmul only when it also carries the mark of a library that ships GEMM/conv/attention kernels
# (cuBLAS/cuBLASLt by its architecture-prefixed and helper names and nvjet, CUTLASS, cuDNN, flash
# and memory-efficient attention, ROCm Tensile and MIOpen, PyTorch's native convolutions) or is a
# Triton matmul template; otherwise only the launching op's operands can say so
# (:func:`classify_with_operands`).
_LIBRARY = re.compile(
    r"cublas|nvjet|cutlass|cudnn|xmma|hmma|gmma|imma|mfma|tensorop|flash|fmha|MemEffAttention|Cijk_|miopen"
    r"|implicit_convolve|winograd|gemv2|gemmSN|gemmk1|^(?:void )?(?:ampere|volta|turing|maxwell|pascal|hopper"
    r"|ada|sm\d+)_|at::native::\S*conv",
    re.IGNORECASE,
)
# FBGEMM's own kernels (embedding bags, permutes, quantization) are not matmuls; its GEMMs are CUTLASS.
_NOT_MATMUL_FAMILY = re.compile(r"fbgemm(?!.*cutlass)", re.IGNORECASE)
_TRITON_MM = re.compile(r"^triton_.*(?:tem_|_mm|_bmm|_addmm|matmul|_dot)", re.IGNORECASE)
_TENSOR_CORE = re.compile(
    r"hmma|gmma|wgmma|xmma|imma|mfma|tensorop|nvjet|flash|fmha"
    r"|[shi](?:884|1688|16816|8816|16832)|_MI\d+x\d+|tf32",
    re.IGNORECASE,
)
_LOW_PRECISION = re.compile(
    r"c10::Half|c10::BFloat16|__half|__nv_bfloat16|bfloat16|float16|bf16|fp16|f16|_h884|h1688|h16816"
    r"|hgemm|e4m3|e5m2|fp8|_HB_|_HH_|_BB_|nvjet_h|nvjet_b",
    re.IGNORECASE,
)
_TF32 = re.compile(r"tf32|tensorop_s1688|_s1688gemm", re.IGNORECASE)
_FP32 = re.compile(r"sgemm|<float|float>|_f32|fp32|Cijk_.*_SB_|gemmSN|gemv2", re.IGNORECASE)
# Scalar FMA kernels carry "xmma"/"cutlass" in their names too (cuBLAS's fp32 GEMMs on an H100 are
# ``sm80_xmma_gemm_f32f32_f32f32_f32_..._ffma_...`` and ``cutlass_80_simt_sgemm_...``): no tensor cores.
_SCALAR_FMA = re.compile(r"ffma|hfma|simt", re.IGNORECASE)
# cuBLAS's Hopper GEMMs name their operand types in three letters: ``nvjet_sm90_hsh_...`` (fp16),
# ``nvjet_sm90_tst_...`` (bf16), read off an H100 trace of each dtype; older builds drop ``sm90_``.
_NVJET_TYPES = re.compile(r"nvjet_(?:sm\d+_)?([a-z])[a-z]{2}_", re.IGNORECASE)
_NVJET_LOW = frozenset("htqe")  # fp16, bf16, and the fp8 letters


@dataclass(frozen=True)
class KernelClass:
    """How a kernel name reads: group, matmul-like, tensor cores, precision (low | tf32 | fp32 | unknown)."""

    group: str
    matmul: bool
    tensor_core: bool
    precision: str


@functools.lru_cache(maxsize=65536)
def classify_kernel(name: str) -> KernelClass:
    """Classify a kernel by name (see the module docstring for the name families)."""
    if _COMM.search(name):
        return KernelClass(COMMUNICATION, False, False, _precision(name))
    triton_mm = bool(_TRITON_MM.search(name))
    matmul = triton_mm or (bool(_MATMUL.search(name)) and bool(_LIBRARY.search(name))
                           and not _NOT_MATMUL_FAMILY.search(name))
    precision = _precision(name)
    # Tensor cores have no plain-fp32 mode (fp32 data goes through them as TF32), so a kernel named
    # fp32 runs on CUDA cores whatever family it belongs to.
    tensor_core = (
        matmul
        and (triton_mm or bool(_TENSOR_CORE.search(name)))
        and not _SCALAR_FMA.search(name)
        and precision != "fp32"
    )
    return KernelClass(COMPUTE, matmul, tensor_core, precision)


def _precision(name: str) -> str:
    nvjet = _NVJET_TYPES.search(name)
    if nvjet:
        letter = nvjet.group(1).lower()
        # An fp32 ("s") operand on tensor cores is TF32; other letters are not known here.
        return "low" if letter in _NVJET_LOW else ("tf32" if letter == "s" else "unknown")
    if _LOW_PRECISION.search(name):
        return "low"
    if _TF32.search(name):
        return "tf32"
    if _FP32.search(name):
        return "fp32"
    return "unknown"


# Operand dtypes as torch.profiler writes them in an op's "Input type" (record_shapes=True).
_LOW_OPERANDS = (b'::Half"', b'::BFloat16"', b"::Float8_")


def operand_precision(input_types: Any) -> str | None:
    """"low" when any operand is fp16/bf16/fp8, "fp32" when any is float (and none is low), else None.

    ``input_types`` is the raw JSON of the op's "Input type" list (a ``msgspec.Raw``), or the list
    itself from the lenient reader; entries that are not dtype names are ignored. Runs once per op,
    so the raw form is only searched as bytes."""
    if type(input_types) is list:
        input_types = b"[" + b",".join(b"\"%s\"" % t.encode() for t in input_types if type(t) is str) + b"]"
    try:
        raw = bytes(input_types)
    except TypeError:
        return None
    if not raw.startswith(b"["):
        return None  # not a list: a malformed or foreign field
    if b'"c10::' in raw:
        for marker in _LOW_OPERANDS:
            if marker in raw:
                return "low"
    return "fp32" if b'"float"' in raw else None


@functools.lru_cache(maxsize=65536)
def classify_with_operands(name: str, operands: str) -> KernelClass:
    """:func:`classify_kernel`, corrected by the dtype of the op that launched the kernel.

    The op's operands are the ground truth the name only hints at: fp16/bf16 operands make the
    kernel low precision whatever its name says; fp32 operands settle a name of unknown precision
    (TF32 when the name says tensor cores, fp32 otherwise) but never override a name that says
    low precision (a cast kernel reads fp32 and writes bf16)."""
    c = classify_kernel(name)
    if not c.matmul and c.group == COMPUTE and _MATMUL.search(name) and not _NOT_MATMUL_FAMILY.search(name):
        # A GEMM-like name of no known library, launched by a matmul-like op (only those ops'
        # operands are recorded): the op is the evidence. Its helpers (bias adds, casts) stay as they are.
        c = KernelClass(c.group, True, False, c.precision)
    precision = c.precision
    if operands == "low":
        precision = "low"
    elif operands == "fp32" and precision == "unknown":
        tc_name = c.matmul and bool(_TENSOR_CORE.search(name) or _TRITON_MM.search(name)) and not _SCALAR_FMA.search(name)
        precision = "tf32" if tc_name else "fp32"
    if precision == c.precision:
        return c
    tensor_core = (
        c.matmul
        and bool(_TRITON_MM.search(name) or _TENSOR_CORE.search(name))
        and not _SCALAR_FMA.search(name)
        and precision != "fp32"
    )
    return KernelClass(c.group, c.matmul, tensor_core, precision)


# Collective kinds by kernel name (NCCL/RCCL): what a communication kernel does decides which
# settings can hide it. NCCL implements all-to-all as grouped send/recv (``ncclKernel_SendRecv``).
_COLLECTIVES = (
    ("allreduce", re.compile(r"all_?reduce|cross_device_reduce", re.IGNORECASE)),
    ("reduce_scatter", re.compile(r"reduce_?scatter", re.IGNORECASE)),
    ("allgather", re.compile(r"all_?gather", re.IGNORECASE)),
    ("all_to_all", re.compile(r"all_?to_?all", re.IGNORECASE)),
    ("send_recv", re.compile(r"send_?recv|_send|_recv", re.IGNORECASE)),
    ("broadcast", re.compile(r"broadcast", re.IGNORECASE)),
)
# Collectives that DDP/FSDP issue for gradients and parameters (bucket and prefetch settings apply).
DATA_PARALLEL_COLLECTIVES = frozenset({"allreduce", "reduce_scatter", "allgather"})


@functools.lru_cache(maxsize=4096)
def collective_of(name: str) -> str:
    """The collective a communication kernel runs: allreduce, reduce_scatter, allgather, all_to_all,
    send_recv, broadcast, or other."""
    for kind, pattern in _COLLECTIVES:
        if pattern.search(name):
            return kind
    return "other"


def is_comm_name(name: str) -> bool:
    """True for collective names on the host too (``nccl:all_reduce``, ``gloo:all_reduce``, c10d ops)."""
    return bool(_COMM.search(name)) or name.startswith(("gloo:", "c10d::", "record_param_comms"))


def short_name(name: str, limit: int = 90) -> str:
    """A kernel or op name without template arguments and parameter lists, for tables."""
    out = []
    depth = 0
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    text = "".join(out).strip()
    if text.endswith(")") and not text.startswith(("Memcpy", "Memset")):
        # Drop the trailing parameter list: the '(' that matches the final ')'.
        depth = 0
        for k in range(len(text) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(text[k], 0)
            if depth == 0:
                text = text[:k] if k > 0 else text
                break
    text = text.removeprefix("void ").strip() or name
    return text if len(text) <= limit else text[: limit - 1] + "…"
