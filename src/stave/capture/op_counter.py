"""Counts aten ops and FLOPs by phase over one of the user's own warm-up steps.

A ``TorchDispatchMode`` that runs every op unchanged (no decomposition, so the numbers the
user's step computes are bit-identical) and adds the op's FLOPs from PyTorch's own formula
registry (``torch.utils.flop_counter``). It slows the step it watches, which is why that step is
left out of the statistics.

Attention is counted apart: the ``scaled_dot_product_attention`` kernel the dispatcher chose
(flash / memory-efficient / cuDNN; the math path shows as batched matmuls) and the FLOPs of
attention-shaped work (those kernels and batched matmuls, which is what eager attention runs), the
part of the model whose cost grows with the square of the sequence length. PyTorch has no FLOP
formula for the CPU flash kernel; :func:`cpu_flash_flops` supplies it.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections import Counter
from typing import Any, Callable

from stave.measure.config import FULL_PRECISION, LOW_PRECISION, PRODUCT, ConvShape

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

log = logging.getLogger(__name__)

# Ops whose work is a matrix product (convolutions as their im2col GEMM): their shapes are what a
# precision change speeds up, so the probes time these shapes rather than one generic GEMM.
_GEMM_OPS = {
    torch.ops.aten.mm.default: "mm",
    torch.ops.aten.addmm.default: "addmm",
    torch.ops.aten.bmm.default: "bmm",
    torch.ops.aten.baddbmm.default: "baddbmm",
    torch.ops.aten.convolution.default: "conv",
    torch.ops.aten.convolution_backward.default: "conv_bwd",
}


# Random-number kernels run on one thread on a CPU whatever the intra-op pool (torch keeps the CPU
# generator's sequence reproducible): dropout's mask is most of a transformer's serial work.
_SERIAL_RNG = frozenset({"bernoulli", "bernoulli_", "native_dropout", "uniform_", "normal_", "random_",
                         "exponential_", "geometric_", "cauchy_", "log_normal_", "multinomial", "randperm",
                         "rand", "randn", "randint", "rand_like", "randn_like", "randint_like"})
# ATen's parallel grain (at::internal::GRAIN_SIZE): an op over fewer elements, inputs and outputs
# alike, runs inline on the calling thread.
PARALLEL_GRAIN_ELEMENTS = 32768


def tensor_leaves(obj: Any) -> list[torch.Tensor]:
    """The tensors in an op's arguments or outputs (nested lists, tuples and dicts: all an ATen
    schema passes). ``torch.utils._pytree.tree_leaves`` does the same for any registered container
    and costs tens of microseconds a call on an LSTM cell's arguments; this runs on every op the
    counter watches, so the watched step would take several times its time."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    out: list[torch.Tensor] = []
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            out.append(item)
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
    return out


def _runs_serially(name: str, tensors: list[torch.Tensor]) -> bool:
    """Whether a (non-product) CPU op over ``tensors`` (inputs and outputs) runs on one thread
    whatever the pool size."""
    if name in _SERIAL_RNG:
        return True
    return bool(tensors) and max(t.numel() for t in tensors) < PARALLEL_GRAIN_ELEMENTS


def _prod(values: Any) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def gemm_dims(kind: str, args: Any, out: Any) -> tuple[int, int, int, int] | None:
    """(batch, m, n, k) of the matrix product an op computes; ``None`` when the shapes do not say."""
    try:
        if kind == "mm":
            a, b = args[0], args[1]
            return 1, int(a.shape[0]), int(b.shape[1]), int(a.shape[1])
        if kind == "addmm":
            a, b = args[1], args[2]
            return 1, int(a.shape[0]), int(b.shape[1]), int(a.shape[1])
        if kind in ("bmm", "baddbmm"):
            a, b = (args[0], args[1]) if kind == "bmm" else (args[1], args[2])
            return int(a.shape[0]), int(a.shape[1]), int(b.shape[2]), int(a.shape[2])
        if kind in ("conv", "conv_bwd"):
            # im2col: rows are output positions, columns output channels, depth the receptive field.
            weight = args[1] if kind == "conv" else args[2]
            result = out if kind == "conv" else args[0]
            groups = int(args[8]) if kind == "conv" else int(args[9])
            n_out = _prod(result.shape[2:]) * int(result.shape[0])
            return groups, n_out, int(weight.shape[0]) // max(groups, 1), _prod(weight.shape[1:])
    except (AttributeError, IndexError, TypeError, ValueError):
        return None
    return None


def conv_key(kind: str, args: Any) -> tuple | None:
    """A convolution call's own parameters, hashable: what the precision probe rebuilds to time the
    real convolution (oneDNN's bf16 convolutions do not speed up as their im2col GEMM does).

    ``(input_shape, weight_shape, stride, padding, dilation, transposed, output_padding, groups,
    backward, output_mask, channels_last)``; ``None`` when the arguments do not say.
    """
    try:
        if kind == "conv":
            x, w = args[0], args[1]
            rest = args[3:9]
            mask: tuple[bool, ...] = ()
        else:  # convolution_backward(grad_output, input, weight, bias_sizes, stride, ..., groups, output_mask)
            x, w = args[1], args[2]
            rest = args[4:10]
            mask = tuple(bool(m) for m in args[10])
        stride, padding, dilation, transposed, output_padding, groups = rest
        channels_last = x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)
        return (tuple(int(v) for v in x.shape), tuple(int(v) for v in w.shape), tuple(int(v) for v in stride),
                tuple(int(v) for v in padding), tuple(int(v) for v in dilation), bool(transposed),
                tuple(int(v) for v in output_padding), int(groups), kind == "conv_bwd", mask, bool(channels_last))
    except (AttributeError, IndexError, TypeError, ValueError):
        return None


def _top_by_flops(flops: "Counter[Any]", share: float, limit: int) -> list[tuple[Any, int]]:
    """The keys holding ``share`` of ``flops`` (at most ``limit``), largest first."""
    total = sum(flops.values())
    out: list[tuple[Any, int]] = []
    covered = 0
    for key, value in flops.most_common(limit):
        if total and covered >= share * total:
            break
        out.append((key, int(value)))
        covered += value
    return out


# Metadata queries are not work; counting them would inflate "ops per step".
_IGNORED = {
    torch.ops.aten.size.default,
    torch.ops.aten.stride.default,
    torch.ops.aten.sym_size.default,
    torch.ops.aten.sym_stride.default,
    torch.ops.aten.numel.default,
    torch.ops.aten.dim.default,
    torch.ops.aten.is_contiguous.default,
    torch.ops.prim.layout.default,
}


# Batched matmuls: eager attention's QK^T and AV (linear layers run as mm/addmm).
_BATCHED_MATMUL = {torch.ops.aten.bmm, torch.ops.aten.baddbmm}
SDPA_MARK = "scaled_dot_product"


def cpu_flash_flops(args: Any, backward: bool) -> int:
    """FLOPs of the CPU flash-attention kernel: two matmuls forward (QK^T, AV), four backward."""
    q, k, v = args[0], args[1], args[2]
    if backward:  # (grad_out, q, k, v, ...)
        q, k, v = args[1], args[2], args[3]
    batch_heads = q.numel() // (q.shape[-2] * q.shape[-1])
    forward = 2 * batch_heads * q.shape[-2] * k.shape[-2] * (q.shape[-1] + v.shape[-1])
    return int(2 * forward if backward else forward)


# Ops autocast runs in fp32 on a CPU whatever their inputs dtype, as they appear at the aten level:
# the losses (cross_entropy as its log_softmax and nll_loss) and the numerically sensitive ops of
# autocast's CPU fp32 list. Their outputs stay fp32 under autocast.
_AUTOCAST_FP32_PREFIXES = (
    "nll_loss", "_log_softmax", "log_softmax", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
    "binary_cross_entropy", "kl_div", "soft_margin_loss", "multi_margin_loss", "multilabel_margin_loss",
    "margin_ranking_loss", "hinge_embedding_loss", "poisson_nll_loss", "cosine_embedding_loss",
    "triplet_margin_loss", "ctc_loss", "cdist", "prod", "linalg_", "_linalg_", "fft_", "_fft_", "stft",
)


# A tensor of attention scores is [batch, heads, rows, rows] (or [batch * heads, rows, rows]);
# below this many rows the square is too small to be attention's cost.
ATTENTION_MIN_ROWS = 16


def _is_attention_shaped(first: torch.Tensor) -> bool:
    """Whether an op's first output is a stack of square row-by-row matrices: attention's scores,
    their mask, softmax and dropout in an attention computed op by op (eager attention, SDPA's math
    path), and their gradients, the part of attention whose cost grows with the rows squared."""
    if first.dim() < 3:
        return False
    rows, cols = first.shape[-2], first.shape[-1]
    return rows == cols and rows >= ATTENTION_MIN_ROWS


class OpCounter(TorchDispatchMode):
    """Counts ops and FLOPs, keyed by the phase ``phase_fn()`` reports at each op.

    On a CPU it also times each op where it runs and puts its time in one of three buckets, which
    is what ``torch.autocast`` would change: the matrix products and convolutions (``PRODUCT``:
    autocast runs them in bf16); the other ops whose floating inputs would all be bf16 under
    autocast (``LOW_PRECISION``: a product's output is bf16 there, and so is whatever is computed
    from bf16 tensors alone: activations, pooling, normalization of a bf16 input, their gradients),
    and the rest (``FULL_PRECISION``: ops on fp32 inputs such as an fp32 residual stream or the
    parameters' updates, mixed inputs that promote to fp32, and the ops autocast keeps in fp32).
    The step it watches is not counted, so the timing costs the user nothing.
    """

    def __init__(self, phase_fn: Callable[[], str]) -> None:
        super().__init__()
        self.phase_fn = phase_fn
        self.ops: Counter[str] = Counter()
        self.flops: Counter[str] = Counter()
        self.attention_flops: Counter[str] = Counter()
        self.sdpa_kernels: Counter[str] = Counter()
        # CPU only: nanoseconds per phase in attention's ops (see _is_attention_shaped).
        self.attention_ns: Counter[str] = Counter()
        # FLOPs per matrix-product shape (batch, m, n, k), all phases together; convolutions as
        # their im2col GEMM here, and apart by their own parameters in ``conv_flops``.
        self.gemm_flops: Counter[tuple[int, int, int, int]] = Counter()
        # The same FLOPs of the plain matrix products (mm, addmm, bmm, baddbmm) alone.
        self.matmul_flops: Counter[tuple[int, int, int, int]] = Counter()
        # Convolution FLOPs per call's own parameters (:func:`conv_key`), and FLOPs of one call.
        self.conv_flops: Counter[tuple] = Counter()
        self.conv_call_flops: dict[tuple, int] = {}
        # Matrix-product FLOPs by the dtype they ran in (autocast's bf16 shows here as bfloat16).
        self.gemm_flops_by_dtype: Counter[str] = Counter()
        # CPU only: nanoseconds inside ops per (phase, bucket) (see the class docstring).
        self.op_ns: Counter[tuple[str, str]] = Counter()
        # CPU only: nanoseconds and calls per phase of the ops that run on one thread whatever the
        # pool (random-number kernels, ops under ATen's parallel grain; products excluded).
        self.serial_ns: Counter[str] = Counter()
        self.serial_ops: Counter[str] = Counter()
        # CPU only: calls per phase of the other ops, products excluded, that touch a tensor at or over
        # ATen's grain (their work can grow with the data however few FLOPs they count).
        self.large_ops: Counter[str] = Counter()
        # Tensors that would be bf16 under autocast (by id, with a weak reference to tell a reused id).
        self._low: dict[int, weakref.ref] = {}
        self.formula_errors = 0

    def _would_be_low(self, t: torch.Tensor) -> bool:
        ref = self._low.get(id(t))
        return ref is not None and ref() is t

    def _mark_low(self, outputs: list[torch.Tensor]) -> None:
        for t in outputs:
            if t.is_floating_point():
                try:
                    self._low[id(t)] = weakref.ref(t)
                except TypeError:
                    continue

    def _bucket(self, name: str, product: bool, inputs: list[torch.Tensor]) -> str:
        """Which of the three buckets an op's time goes to (see the class docstring)."""
        if product:
            return PRODUCT
        if name.startswith(_AUTOCAST_FP32_PREFIXES):
            return FULL_PRECISION
        # A normalization's weights and running statistics are fp32 parameters it accepts beside a
        # bf16 input (mixed types, bf16 out); elsewhere a 1-d fp32 operand (a bias) promotes to fp32.
        min_dim = 2 if "norm" in name else 1
        floats = [t for t in inputs if t.is_floating_point() and t.dim() >= min_dim]
        if floats and all(self._would_be_low(t) for t in floats):
            return LOW_PRECISION
        return FULL_PRECISION

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        start_ns = time.perf_counter_ns()
        out = func(*args, **kwargs)
        elapsed_ns = time.perf_counter_ns() - start_ns
        if func in _IGNORED:
            return out
        phase = self.phase_fn()
        self.ops[phase] += 1
        packet = func._overloadpacket
        name = packet.__name__
        formula = flop_registry.get(packet)
        flops = 0
        try:
            if formula is not None:
                flops = int(formula(*args, **kwargs, out_val=out))
            elif name.startswith("_scaled_dot_product_flash_attention_for_cpu"):
                flops = cpu_flash_flops(args, backward=name.endswith("backward"))
        except (TypeError, ValueError, RuntimeError, IndexError, AttributeError):
            # An op called with a signature the formula does not cover: count the op, not its FLOPs.
            self.formula_errors += 1
        self.flops[phase] += flops
        kind = _GEMM_OPS.get(func)
        dims = gemm_dims(kind, args, out) if kind is not None and flops else None
        if dims is not None:
            self.gemm_flops[dims] += flops
            if kind in ("conv", "conv_bwd"):
                key = conv_key(kind, args)
                if key is not None:
                    self.conv_flops[key] += flops
                    self.conv_call_flops[key] = flops
            else:
                self.matmul_flops[dims] += flops
            dtype = getattr(out[0] if isinstance(out, (tuple, list)) else out, "dtype", None)
            if kind == "conv_bwd":
                dtype = getattr(args[0], "dtype", None)
            if dtype is not None:
                self.gemm_flops_by_dtype[str(dtype).replace("torch.", "")] += flops
        attention = SDPA_MARK in name or packet in _BATCHED_MATMUL
        self._time_op(phase, name, dims is not None, attention, args, kwargs, out, elapsed_ns)
        if SDPA_MARK in name:
            if not name.endswith("backward"):
                self.sdpa_kernels[name.lstrip("_")] += 1
            self.attention_flops[phase] += flops
        elif packet in _BATCHED_MATMUL:
            self.attention_flops[phase] += flops
        return out

    def _time_op(self, phase: str, name: str, product: bool, attention: bool, args: Any, kwargs: Any, out: Any,
                 elapsed_ns: int) -> None:
        """Put a CPU op's time in its bucket and mark its outputs when autocast would make them bf16.
        On a GPU the host's time around an op is its launch, not its work: nothing is timed."""
        outputs = tensor_leaves(out)
        first = outputs[0] if outputs else None
        if first is None or first.device.type != "cpu":
            return
        # The inputs' tensors, found once for the bucket and the serial test (this runs on every op).
        inputs = tensor_leaves((args, kwargs))
        bucket = self._bucket(name, product, inputs)
        self.op_ns[(phase, bucket)] += elapsed_ns
        if attention or _is_attention_shaped(first):
            self.attention_ns[phase] += elapsed_ns
        if not product and _runs_serially(name, inputs + outputs):
            self.serial_ns[phase] += elapsed_ns
            self.serial_ops[phase] += 1
        elif not product and any(t.numel() >= PARALLEL_GRAIN_ELEMENTS for t in inputs + outputs):
            self.large_ops[phase] += 1
        if bucket != FULL_PRECISION:
            self._mark_low(outputs)

    def op_s_by_phase(self) -> dict[str, dict[str, float]]:
        """Seconds inside ops per phase and bucket (CPU runs; empty on a GPU)."""
        out: dict[str, dict[str, float]] = {}
        for (phase, bucket), ns in self.op_ns.items():
            out.setdefault(phase, {})[bucket] = ns / 1e9
        return out

    def top_gemms(self, share: float, limit: int, convolutions: bool = True) -> list[list[int]]:
        """The shapes holding ``share`` of the matrix-product FLOPs (at most ``limit``), largest
        first, each as ``[batch, m, n, k, flops_per_step]``; ``convolutions=False``: of the plain
        matrix products alone (convolutions are in :meth:`top_convs`)."""
        flops = self.gemm_flops if convolutions else self.matmul_flops
        return [[*dims, value] for dims, value in _top_by_flops(flops, share, limit)]

    def top_convs(self, share: float, limit: int) -> list[ConvShape]:
        """The convolution calls holding ``share`` of the convolution FLOPs (at most ``limit``)."""
        out = []
        for key, value in _top_by_flops(self.conv_flops, share, limit):
            x, w, stride, padding, dilation, transposed, output_padding, groups, backward, mask, channels_last = key
            out.append(ConvShape(input_shape=list(x), weight_shape=list(w), stride=list(stride),
                                 padding=list(padding), dilation=list(dilation), transposed=transposed,
                                 output_padding=list(output_padding), groups=groups, backward=backward,
                                 output_mask=list(mask), channels_last=channels_last,
                                 flops_per_call=self.conv_call_flops.get(key, 0), flops_per_step=value))
        return out

    def gemm_dtype(self) -> str | None:
        """The dtype most of the step's matrix-product FLOPs ran in (None: no matrix products)."""
        return self.gemm_flops_by_dtype.most_common(1)[0][0] if self.gemm_flops_by_dtype else None
