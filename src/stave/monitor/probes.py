"""Short measurements the doctor takes after the user's script has ended (never during it).

Three probes; the two ratios run their sides interleaved (A B A B) after a warm-up, so a noisy
machine slows both sides alike:

* bf16 vs fp32 matmul on the device: what mixed precision would buy the model's GEMMs. On CPU only
  where the CPU has native bf16 (elsewhere bf16 is emulated and the answer is known: no).
* the same fp32 matmul at the script's torch thread count vs one thread per usable core, only when
  the script asked for more threads than it may use (oversubscription).
* on a CPU, the same fp32 matmul at the script's thread count beside one busy process (a spinning
  child, paused between the timed windows) over the same alone: the stretch one more runnable
  thread than there are cores gives the step's parallel ops, which the step model prices every
  fix that adds or removes CPU load with.
* the fixed host cost of one tiny tensor op: the floor under every op the step launches
  (dispatch, allocation and, on a GPU, the launch; measured as the thread's CPU time, with autograd
  off, so it is the per-op floor rather than a forward op's full cost).

The bf16 probe's fp32 side also gives the device's fp32 matmul rate (FLOP/s).

The probes never draw from a global generator (inputs come from a private ``torch.Generator``),
and they restore every torch setting they touch, so the user's results are unchanged.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch

from stave import device as dev
from stave.measure.config import ConvShape
from stave.measure.host import MACHINE_BUSY_MIN_CORES
from stave.measure.record import ProbeResults

log = logging.getLogger(__name__)

# 1024x1024 GEMMs are the size of a transformer's or a wide CNN's per-layer GEMMs at small batch on
# a CPU (a few ms each), long enough to time and short enough for several pairs within budget.
CPU_MATMUL_SIZE = 1024
# Smaller fall-backs (8x less work each) when a slow or loaded machine cannot fit the pairs.
CPU_MATMUL_SIZES = (CPU_MATMUL_SIZE, 512, 256)
# On a GPU a 1024 GEMM takes ~10 us and is launch-bound; 4096 keeps the tensor cores busy as a
# training GEMM does, while still taking only ~1 ms in fp32 on current GPUs.
GPU_MATMUL_SIZE = 4096
GPU_MATMUL_SIZES = (GPU_MATMUL_SIZE, 2048, 1024)
# Tiny ops per timed window of the overhead probe: long enough that the clock's own cost vanishes.
OVERHEAD_OPS_PER_WINDOW = 1000
# Pairs (A then B) a ratio probe aims for; fewer are run when the budget runs out, never fewer
# than MIN_PAIRS (a median of one pair would be a single noisy reading).
TARGET_PAIRS = 7
MIN_PAIRS = 3
# Calls per timed window at most: beyond ~50 the window is long enough and more pairs help more.
MAX_REPS = 50
# ... except where that many calls take under this long: a window of a few hundred microseconds (a
# batch-2 GEMM in bf16 takes a few) is dominated by the clock's and the scheduler's jitter (tens of
# microseconds a wake-up), so its pairs spread past PROBE_SPREAD_MAX on a quiet machine; such calls
# get as many reps as fill a millisecond, within the budget.
MIN_WINDOW_S = 1e-3
# Library start-up excused from a probe's budget at most (see _interleaved_ratio).
MAX_STARTUP_S = 2.0
# Budget shares of the probes (renormalized over those that run). The thread probe, which only runs
# when the pool exceeds the cores, switches thread pools (the first calls after a switch are slow),
# times each of the step's GEMM shapes and their outputs at two thread counts, and one call of an
# oversubscribed pool takes several times its normal time: it gets the largest share. The busy-threads
# probe (beside other busy processes) times the same work at two thread counts: the same share.
_SHARES = {"bf16": 0.45, "rate": 0.45, "batch_scale": 0.3, "threads": 1.2, "busy_threads": 1.2, "neighbour": 0.9,
           "spin": 0.3, "wake": 0.6, "overhead": 0.15, "pinned": 0.3}
# The batch-scaling probe times each of the step's GEMM shapes at its batch rows and at this many
# times them: wide enough apart that the line through the two times separates the per-call cost
# from the per-row cost, while the larger operand stays a training-sized GEMM. 8x is also a
# typical growth SMALL_BATCH names (it doubles while a doubling gains 5 %, up to 32x).
BATCH_SCALE_GROWTH = 8
# The share of the precision (or rate) probe's slice the step's own products may use: the rest is
# left for one square GEMM when none of them fits, so a slow machine still gets an answer.
OWN_SHAPES_SHARE = 0.75
_SEED = 20240601
# A shape's A/B pairs that differ by more than a quarter were disturbed: the same work timed back to
# back varies by a few percent on a quiet core, so a larger spread means other load took the core.
PROBE_SPREAD_MAX = 0.25
# Operands above this many elements per matrix (64 Mi floats, 256 MB in fp32) are not built for a
# probe: memory the user's job may need; such a GEMM is compute-bound and the generic probe speaks for it.
MAX_PROBE_ELEMENTS = 64 * 1024 * 1024  # the private generator's seed: fixed so the probe inputs are the same each run


def _timed(fn: Callable[[], object], device: torch.device, reps: int) -> float:
    """Seconds per call of ``fn`` over ``reps`` calls, the device drained before and after."""
    dev.synchronize(device)
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    dev.synchronize(device)
    return (time.perf_counter() - start) / reps


Pair = tuple[Callable[[], object], Callable[[], object]]


@dataclass(frozen=True)
class RatioResult:
    """An interleaved A/B measurement: median ratio of pair times, size used, per-call medians."""

    ratio: float
    size: int
    a_s: float
    b_s: float
    # (largest - smallest) / median of the pair ratios: how much the machine moved under the probe.
    spread: float = 0.0


def _interleaved_ratio(
    sizes: tuple[float, ...],
    make: Callable[[float], Pair],
    device: torch.device,
    deadline: float,
    setup_a: Callable[[], None] | None = None,
    setup_b: Callable[[], None] | None = None,
    work_exponent: float = 3.0,
    smallest_first: bool = False,
) -> RatioResult | None:
    """Median over A/B pairs of time(A) / time(B), the problem size it was measured at, and each
    side's median seconds per call.

    ``smallest_first``: the first calls, which price a call, run at the smallest size and the
    larger ones are extrapolated from it: where a call may be far slower than the budget (an
    oversized thread pool: 0.3 s for one convolution at 16 threads on 2 cores), pricing it at the
    largest size would spend the whole slice on finding out it does not fit.

    ``make(size)`` builds the two sides. The largest of ``sizes`` whose MIN_PAIRS pairs fit before
    ``deadline`` is used (a slow or loaded machine gets a smaller GEMM rather than no answer; a
    call's work grows with ``size ** work_exponent``: a square GEMM's side cubed, 1 for a share of
    a product's rows);
    ``None`` when even the smallest does not fit. ``setup_a``/``setup_b`` switch a setting before
    each side (the thread count); the first call after a switch is untimed, so the switch itself
    is not measured.
    """

    def run(fn: Callable[[], object], setup: Callable[[], None] | None, reps: int) -> float:
        if setup is not None:
            setup()
            _timed(fn, device, 1)
        return _timed(fn, device, reps)

    untimed = (setup_a is not None) + (setup_b is not None)
    first = sizes[-1] if smallest_first else sizes[0]
    a, b = make(first)
    # The first calls pay one-time library start-up (a cuBLAS handle, lazily loaded kernels: up to a
    # second on a GPU in a fresh process). That is not the probe's work: it moves the deadline rather
    # than eating the budget, up to MAX_STARTUP_S. The second calls give the cost per call.
    startup = time.perf_counter()
    run(a, setup_a, 1)
    run(b, setup_b, 1)
    deadline += min(time.perf_counter() - startup, MAX_STARTUP_S)
    per_call = max(run(a, setup_a, 1), run(b, setup_b, 1), 1e-9)
    left = deadline - time.perf_counter()
    for size in sizes:
        # A GEMM's work grows with the cube of its side.
        if left >= MIN_PAIRS * (2 + untimed) * per_call * (size / first) ** work_exponent:
            break
    else:
        log.debug("probe skipped: %.3f s per call does not fit %.3f s left", per_call, left)
        return None
    if size != first:
        a, b = make(size)
        per_call = max(run(a, setup_a, 1), run(b, setup_b, 1), 1e-9)
        left = deadline - time.perf_counter()
    reps = max(1, min(max(MAX_REPS, int(MIN_WINDOW_S / per_call)), int((left / TARGET_PAIRS / per_call - untimed) / 2)))
    times_a: list[float] = []
    times_b: list[float] = []
    while len(times_a) < TARGET_PAIRS:
        t0 = time.perf_counter()
        times_a.append(run(a, setup_a, reps))
        times_b.append(run(b, setup_b, reps))
        pair_s = time.perf_counter() - t0
        if len(times_a) >= MIN_PAIRS and time.perf_counter() + pair_s > deadline:
            break
    ratios = [ta / tb for ta, tb in zip(times_a, times_b)]
    middle = statistics.median(ratios)
    return RatioResult(
        ratio=middle,
        size=size,
        a_s=statistics.median(times_a),
        b_s=statistics.median(times_b),
        spread=(max(ratios) - min(ratios)) / middle if middle > 0 else 0.0,
    )


def _steadier(first: RatioResult | None, again: Callable[[], RatioResult | None]) -> tuple[RatioResult | None, bool]:
    """``first``, or where its pairs spread past :data:`PROBE_SPREAD_MAX` (other load moved the machine
    under it) the steadier of it and one more timing (``again()``); and whether the second spread too
    (or did not fit): a result then kept is marked, never silently trusted."""
    if first is None or first.spread <= PROBE_SPREAD_MAX:
        return first, False
    second = again()
    best = second if second is not None and second.spread < first.spread else first
    return best, second is None or second.spread > PROBE_SPREAD_MAX


# The pinned probe copies at most this many bytes a call (a batch of 224 px float32 images at 256 is
# 154 MB): host memory the job may need, and a copy this large runs at the link's steady rate.
PINNED_PROBE_MAX_BYTES = 256 * 1024 * 1024


def _pinned_copy_probe(nbytes: int, device: torch.device, deadline: float) -> RatioResult | None:
    """A copy of ``nbytes`` (at most :data:`PINNED_PROBE_MAX_BYTES`) to the GPU from pageable memory
    over the same from pinned memory with ``non_blocking=True``, each drained: what H2D_PAGEABLE's fix
    buys on this machine. A pageable copy is staged through the driver's bounce buffer chunk by chunk;
    how much slower that is depends on the link and the host's memory (about 2x on PCIe 3/4 in
    NVIDIA's bandwidthTest; measured rather than assumed). Smaller copies where the full size does
    not fit the slice (a copy's time grows with its bytes)."""
    top = min(max(nbytes, 0), PINNED_PROBE_MAX_BYTES)
    if top < 1024 or not dev.pin_memory_available():
        return None
    sizes = tuple(float(max(1024, top // d)) for d in (1, 4, 16))

    def make(size: float) -> Pair:
        n = int(size)
        # Written, so its pages are real: an untouched buffer reads the kernel's shared zero page,
        # a copy no training batch gets.
        pageable = torch.ones(n, dtype=torch.uint8)
        pinned = pageable.pin_memory()
        target = torch.empty(n, dtype=torch.uint8, device=device)
        return (lambda: target.copy_(pageable)), (lambda: target.copy_(pinned, non_blocking=True))

    result = _interleaved_ratio(sizes, make, device, deadline, work_exponent=1.0)
    if result is None:
        return None
    return dataclasses.replace(result, size=int(result.size))


def _matmul(size: int, dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> Callable[[], object]:
    a = torch.rand((size, size), generator=gen, device=device, dtype=torch.float32).to(dtype)
    b = torch.rand((size, size), generator=gen, device=device, dtype=torch.float32).to(dtype)
    return lambda: torch.mm(a, b)


def _bf16_probe(device: torch.device, gen: torch.Generator, deadline: float) -> RatioResult | None:
    sizes = GPU_MATMUL_SIZES if dev.is_cuda(device) else CPU_MATMUL_SIZES

    def make(size: int) -> Pair:
        # fp32 runs as the script left it (TF32 on or off): the question is what bf16 adds to that.
        return _matmul(size, torch.float32, device, gen), _matmul(size, torch.bfloat16, device, gen)

    return _interleaved_ratio(sizes, make, device, deadline)


def _gemm(dims: list[int], dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> Callable[[], object]:
    batch, m, n, k = (max(1, int(v)) for v in dims[:4])
    shape_a = (batch, m, k) if batch > 1 else (m, k)
    shape_b = (batch, k, n) if batch > 1 else (k, n)
    a = torch.rand(shape_a, generator=gen, device=device, dtype=torch.float32).to(dtype)
    b = torch.rand(shape_b, generator=gen, device=device, dtype=torch.float32).to(dtype)
    return (lambda: torch.bmm(a, b)) if batch > 1 else (lambda: torch.mm(a, b))


@dataclass(frozen=True)
class OwnShapesResult:
    """fp32 over bf16 time of the step's own GEMMs, each weighted by its count per step."""

    ratio: float
    fp32_flops_per_s: float
    shapes: list[list[int]]
    disturbed: bool


def _square_fp32_rate(device: torch.device, gen: torch.Generator, deadline: float,
                      dtype: torch.dtype = torch.float32) -> float | None:
    """FLOP/s of one square GEMM in ``dtype`` (the largest of the sizes that fits before ``deadline``)."""
    sizes = CPU_MATMUL_SIZES if device.type == "cpu" else GPU_MATMUL_SIZES

    def make(size: int) -> Pair:
        mm = _matmul(size, dtype, device, gen)
        return mm, mm

    result = _interleaved_ratio(sizes, make, device, deadline)
    return 2.0 * result.size**3 / result.a_s if result is not None and result.a_s > 0 else None


# One probe call of the step's own products does at most this much work: a training-sized GEMM or
# convolution (up to tens of GFLOP a call) is timed on fewer rows or samples instead, since its time
# is linear in them once they are many, and the bf16/fp32 ratio and FLOP rate with it. 2^31 FLOP is
# ~5 ms on a 2-core CPU in fp32, so several pairs of each shape fit the probe's share of the budget,
# while a convolution keeps a few samples: on one sample (2^29) its operands fit the cache and its
# bf16 gain read 1.83x where the step's own 32-sample convolutions measured 2.05x (docs/benchmarks.md).
PROBE_CALL_FLOPS_MAX = 2**31
# A dimension is cut down to no fewer than this many rows: below it a GEMM's time stops being
# linear in its rows (per-call and per-tile costs), and the ratio measured would be a small GEMM's.
PROBE_ROWS_MIN = 256


@dataclass(frozen=True)
class ProductWork:
    """One of the step's products as the probe runs it: ``make(dtype, share)`` builds one call
    (possibly on fewer rows or samples than the step's; ``share`` < 1 cuts it further, for a probe
    whose calls run slower than the budget allows: an oversized thread pool), ``count`` is how many
    calls of share 1 make up the step's FLOPs of that product, ``flops_per_step`` those FLOPs,
    ``label`` what the report names."""

    make: Callable[[torch.dtype, float], Callable[[], object]]
    count: float
    flops_per_step: float
    label: list[int]
    convolution: bool = False


def _gemm_work(dims: list[int], device: torch.device, gen: torch.Generator) -> ProductWork | None:
    """A GEMM ``[batch, m, n, k, flops_per_step]``, its largest dimension cut so that one call stays
    within :data:`PROBE_CALL_FLOPS_MAX` and :data:`MAX_PROBE_ELEMENTS` (never below
    :data:`PROBE_ROWS_MIN`); None when it cannot be."""
    if len(dims) < 5 or dims[4] <= 0:
        return None
    full = [max(1, int(v)) for v in dims[:4]]
    call_flops = 2.0 * full[0] * full[1] * full[2] * full[3]
    cut = max(call_flops / PROBE_CALL_FLOPS_MAX, _prod_elems(full) / MAX_PROBE_ELEMENTS, 1.0)
    probe = list(full)
    if cut > 1.0:
        i = max(range(4), key=lambda j: full[j])
        probe[i] = max(PROBE_ROWS_MIN if i else 1, int(full[i] / cut))
        if probe[i] >= full[i] or _prod_elems(probe) > MAX_PROBE_ELEMENTS:
            return None
    scale = full[0] * full[1] * full[2] * full[3] / (probe[0] * probe[1] * probe[2] * probe[3])
    largest = max(range(4), key=lambda j: probe[j])

    def make(dtype: torch.dtype, share: float = 1.0) -> Callable[[], object]:
        dims = list(probe)
        dims[largest] = max(1, int(round(dims[largest] * share)))
        return _gemm(dims, dtype, device, gen)

    return ProductWork(make=make,
                       count=float(dims[4]) / call_flops * scale, flops_per_step=float(dims[4]),
                       label=[int(v) for v in dims[:5]])


def _conv_work(conv: ConvShape, device: torch.device, gen: torch.Generator) -> ProductWork | None:
    """A convolution call (forward, or its backward) on the step's own parameters, on fewer samples
    when one call would exceed :data:`PROBE_CALL_FLOPS_MAX` (a convolution's time is linear in its
    samples); None when the parameters do not build."""
    shape = [int(v) for v in conv.input_shape]
    if len(shape) < 3 or conv.flops_per_call <= 0 or conv.flops_per_step <= 0:
        return None
    samples = shape[0]
    per_sample = conv.flops_per_call / max(samples, 1)
    keep = max(1, min(samples, int(PROBE_CALL_FLOPS_MAX / max(per_sample, 1.0)),
                      int(MAX_PROBE_ELEMENTS / max(1, _prod(shape[1:])))))
    shape[0] = keep
    args = (list(conv.stride), list(conv.padding), list(conv.dilation), bool(conv.transposed),
            list(conv.output_padding), int(conv.groups))

    def make(dtype: torch.dtype, share: float = 1.0) -> Callable[[], object]:
        cut = [max(1, int(round(shape[0] * share))), *shape[1:]]
        x = torch.rand(cut, generator=gen, device=device, dtype=torch.float32).to(dtype)
        w = torch.rand(list(conv.weight_shape), generator=gen, device=device, dtype=torch.float32).to(dtype)
        if conv.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
            w = w.contiguous(memory_format=torch.channels_last)
        if not conv.backward:
            return lambda: torch.ops.aten.convolution(x, w, None, *args)
        grad = torch.ops.aten.convolution(x, w, None, *args)
        grad = grad.contiguous(memory_format=torch.channels_last) if conv.channels_last and grad.dim() == 4 else grad
        # The bias gradient is a reduction, not the product the probe is after: left out.
        mask = (list(conv.output_mask) or [True, True])[:2] + [False]
        return lambda: torch.ops.aten.convolution_backward(grad, x, w, None, *args, mask)

    try:
        make(torch.float32)
    except (RuntimeError, ValueError, TypeError, IndexError) as exc:
        log.debug("convolution %s not rebuilt for the probe: %s", conv.input_shape, exc)
        return None
    calls = conv.flops_per_step / conv.flops_per_call
    return ProductWork(make=make, count=calls * samples / keep, flops_per_step=float(conv.flops_per_step),
                       label=[*conv.input_shape, *conv.weight_shape, int(conv.backward)], convolution=True)


def _prod(values: list[int]) -> int:
    out = 1
    for v in values:
        out *= max(1, int(v))
    return out


def own_products(matmuls: list[list[int]], convs: list[ConvShape], device: torch.device,
                 gen: torch.Generator, share: float = 0.9, limit: int = 6) -> list[ProductWork]:
    """The step's own products to time, largest FLOPs first, covering ``share`` of the FLOPs of
    the given matrix products and convolutions together (at most ``limit`` of them)."""
    candidates: list[tuple[float, Callable[[], ProductWork | None]]] = []
    candidates += [(float(d[4]), lambda d=d: _gemm_work(d, device, gen)) for d in matmuls if len(d) >= 5]
    candidates += [(float(c.flops_per_step), lambda c=c: _conv_work(c, device, gen)) for c in convs]
    candidates.sort(key=lambda item: -item[0])
    total = sum(f for f, _ in candidates)
    out: list[ProductWork] = []
    covered = 0.0
    for flops, build in candidates:
        if len(out) >= limit or (total and covered >= share * total):
            break
        work = build()
        if work is not None:
            out.append(work)
            covered += flops
    return out


def _own_shapes_probe(work: list[ProductWork], device: torch.device, deadline: float,
                      high: torch.dtype = torch.float32, low: torch.dtype = torch.bfloat16) -> OwnShapesResult | None:
    """Time each of the step's own products in ``high`` and ``low`` (interleaved) and combine them
    by their share of the step: ``sum(count x t_high) / sum(count x t_low)``.

    A product whose pairs spread more than :data:`PROBE_SPREAD_MAX` is timed once more (the machine
    moved under it); if it spreads again the result is marked ``disturbed``, never silently used.
    ``low=high`` times one dtype against itself: only its FLOP rate is wanted.
    """
    if not work:
        return None
    t_high = t_low = flops = 0.0
    disturbed = False
    timed: list[list[int]] = []
    start = time.perf_counter()
    slice_s = max(0.0, deadline - start) / len(work)
    for i, item in enumerate(work):
        # Each product keeps its own slice even when one before it overran (a convolution's first
        # call builds its kernels, which no deadline can cut short): the later ones still get timed.
        slice_end = max(start + slice_s * (i + 1), time.perf_counter() + slice_s)

        def make(_size: float, item: ProductWork = item) -> Pair:
            return item.make(high, 1.0), item.make(low, 1.0)

        result, moved = _steadier(_interleaved_ratio((1,), make, device, slice_end),
                                  lambda make=make: _interleaved_ratio((1,), make, device, time.perf_counter() + slice_s))
        disturbed = disturbed or moved
        if result is None:
            continue
        t_high += item.count * result.a_s
        t_low += item.count * result.b_s
        flops += item.flops_per_step
        timed.append(item.label)
    if t_low <= 0 or t_high <= 0:
        return None
    return OwnShapesResult(ratio=t_high / t_low, fp32_flops_per_s=flops / t_high, shapes=timed, disturbed=disturbed)


@dataclass(frozen=True)
class BatchScaleResult:
    """Share of the step's own GEMM time (count-weighted) that does not grow with the batch."""

    fixed_share: float
    shapes: int
    disturbed: bool = False


def batch_dim(dims: list[int], batch_rows: set[int]) -> int | None:
    """Index (of batch, m, n, k) of the dimension that is the step's batch, or None.

    A dimension equal to the micro-batch's samples (or its tokens, for sequences) is the one a
    larger batch grows; 1 is left out (it would match every matrix-vector product).
    """
    for i, v in enumerate(dims[:4]):
        if int(v) > 1 and int(v) in batch_rows:
            return i
    return None


def fixed_share_of_call(ratio_small_over_large: float, growth: int) -> float:
    """The share of a GEMM call at the measured size that a straight line through its time at 1x and
    ``growth``-x the batch rows puts at zero rows (per-call cost), clipped to [0, 1].

    With ``t(g) = a + b g``: ``a / t(1) = (g - t(g)/t(1)) / (g - 1)``.
    """
    if ratio_small_over_large <= 0 or growth < 2:
        return 0.0
    return min(1.0, max(0.0, (growth - 1.0 / ratio_small_over_large) / (growth - 1.0)))


def _batch_scale_probe(shapes: list[list[int]], batch_rows: set[int], device: torch.device,
                       gen: torch.Generator, deadline: float, dtype: torch.dtype = torch.float32) -> BatchScaleResult | None:
    """Time each of the step's own GEMM shapes (in the step's ``dtype``) at its batch rows and at
    :data:`BATCH_SCALE_GROWTH` times them (interleaved), and weight each shape's per-call share by its
    time per step. Shapes without a batch dimension count as growing with the batch (the
    conservative side: they lower the fixed share). A shape whose pairs spread beyond
    :data:`PROBE_SPREAD_MAX` twice is left out."""
    planned: list[tuple[list[int], list[int] | None]] = []
    for dims in shapes:
        if len(dims) < 5 or dims[4] <= 0 or _prod_elems(dims) > MAX_PROBE_ELEMENTS:
            continue
        idx = batch_dim(dims, batch_rows)
        big = None
        if idx is not None:
            big = [int(v) for v in dims[:4]]
            big[idx] *= BATCH_SCALE_GROWTH
            if _prod_elems(big) > MAX_PROBE_ELEMENTS:
                big = None
        planned.append((dims, big))
    if not any(big for _, big in planned):
        return None
    fixed = total = 0.0
    timed = 0
    disturbed = False
    for i, (dims, big) in enumerate(planned):
        slice_s = max(0.0, deadline - time.perf_counter()) / (len(planned) - i)

        def make(_size: int, dims: list[int] = dims, big: list[int] | None = big) -> Pair:
            return _gemm(dims, dtype, device, gen), _gemm(big or dims, dtype, device, gen)

        # Spread twice: its median is kept and marked (a busy machine is when SMALL_BATCH must still be named).
        result, moved = _steadier(_interleaved_ratio((1,), make, device, time.perf_counter() + slice_s),
                                  lambda make=make: _interleaved_ratio((1,), make, device, time.perf_counter() + slice_s))
        disturbed = disturbed or moved
        if result is None:
            continue
        b, m, n, k, step_flops = (int(v) for v in dims[:5])
        per_step_s = step_flops / (2.0 * b * m * n * k) * result.a_s
        total += per_step_s
        if big is not None:
            fixed += per_step_s * fixed_share_of_call(result.ratio, BATCH_SCALE_GROWTH)
            timed += 1
    if total <= 0 or not timed:
        return None
    return BatchScaleResult(fixed_share=fixed / total, shapes=timed, disturbed=disturbed)


def _prod_elems(dims: list[int]) -> int:
    batch, m, n, k = (max(1, int(v)) for v in dims[:4])
    return batch * max(m * k, k * n, m * n)


# Elements of the activation the elementwise half of the thread probe uses without the step's own
# shapes: a [128, 1024] layer output, above torch's parallel grain (32768 elements), so the op is
# split over the threads as a real activation is.
GENERIC_ACTIVATION_ELEMENTS = 128 * 1024


@dataclass(frozen=True)
class ThreadsResult:
    """Times at the script's thread count over at one per core: GEMMs, and elementwise ops."""

    gemm_ratio: float | None
    elementwise_ratio: float | None
    source: str


def _elementwise(elements: int, gen: torch.Generator, dtype: torch.dtype = torch.float32) -> Callable[[], object]:
    x = torch.rand(max(1, int(elements)), generator=gen).to(dtype)
    # An activation then a residual add: the memory-bound ops between a model's GEMMs, each split
    # over the intra-op threads, each paying their wake-up and barrier.
    return lambda: torch.nn.functional.gelu(x).add_(x)


# A GEMM of more FLOPs than a 512-cube one is compute-bound on any CPU: its thread-count ratio is
# the square probe's, which also fits the budget where the step's own (larger) shapes would not.
OWN_SHAPE_MAX_FLOPS = 2 * 512**3


# Shares of a product's call the thread probe falls back to when the full call's pairs do not fit
# its slice: an oversized pool can run a call many times slower than the step's normal pool.
# At 16 threads on 2 cores a training convolution ran 20x slower than at 2 (oversub_conv.py): a
# 1/16 share of its samples still did not fit, so the cuts go on to 1/64 (a call then keeps at
# least one sample, and oneDNN still splits that one over every thread of the pool).
THREADS_PROBE_CUTS = (1.0, 0.25, 0.0625, 0.015625)
# The share of the GEMM half of the thread probe the step's own convolutions may take: when even
# the smallest cut does not fit, the square GEMM falls back on the rest instead of on nothing.
CONV_SHARE_OF_GEMM_HALF = 2 / 3


def _weighted_ratio(work: list[tuple[float, Callable[[float], Callable[[], object]]]], deadline: float,
                    setup_a: Callable[[], None], setup_b: Callable[[], None],
                    cuts: tuple[float, ...] = (1.0,), require_all: bool = False) -> float | None:
    """``sum(count x time at A) / sum(count x time at B)`` over ``(count, make)``, interleaved, each
    within an equal slice of what is left before ``deadline``; None when none fits (``require_all``:
    when any does not: the work left out is the slowest at A, so the ratio of the rest is biased
    low). ``make(share)`` builds the work; the largest of ``cuts`` whose pairs fit is used, its time
    counted back by ``1 / share`` (a share of a product's rows takes that share of its time).

    Each item is first timed in half its slice; pairs that spread past :data:`PROBE_SPREAD_MAX` are
    timed once more in the rest and the steadier of the two kept: other load that moved the machine
    under one attempt (an elementwise ratio of 0.18 on a 2-core VM, 2.4 on a re-run) is not
    silently extrapolated. A quiet probe finishes its pairs early and leaves the time to the next."""
    cpu = torch.device("cpu")
    many = few = 0.0
    for i, (count, make) in enumerate(work):
        slice_s = max(0.0, deadline - time.perf_counter()) / (len(work) - i)
        slice_end = time.perf_counter() + slice_s

        def pair(share: float, make: Callable[[float], Callable[[], object]] = make) -> Pair:
            fn = make(share)
            return fn, fn

        def attempt(end: float) -> RatioResult | None:
            return _interleaved_ratio(cuts, pair, cpu, end, setup_a=setup_a, setup_b=setup_b, work_exponent=1.0,
                                      smallest_first=len(cuts) > 1)

        result = attempt(slice_end - slice_s / 2)
        if result is None:
            result = attempt(slice_end)  # not fitting half the slice (an oversized pool's slow call): the whole
        else:
            result, _ = _steadier(result, lambda: attempt(slice_end))
        if result is not None:
            many += count / result.size * result.a_s
            few += count / result.size * result.b_s
        elif require_all:
            return None
    return many / few if many > 0 and few > 0 else None


def _threads_probe(torch_threads: int, cores: int, gen: torch.Generator, deadline: float,
                   shapes: list[list[int]] | None = None, dtype: torch.dtype = torch.float32,
                   convolutions: list[ProductWork] | None = None) -> ThreadsResult | None:
    """The same work at ``torch_threads`` over at ``cores`` threads: the step's GEMMs, and the
    elementwise ops on their outputs (half the budget each).

    With the step's own GEMM shapes, an activation and residual add over each one's output is
    timed both ways (interleaved), combined by each shape's count per step, and so are the GEMMs
    themselves when all are small enough to fit (:data:`OWN_SHAPE_MAX_FLOPS`; larger ones are
    compute-bound like the square probe, which then stands in). A GEMM hides the threads' wake-ups
    and barrier behind its arithmetic, a memory-bound op on the same output does not. Without
    shapes one square GEMM and one layer-sized activation stand in ("generic"). A step whose
    products include convolutions (``convolutions``: the step's own products, convolutions among
    them) has those timed as they run, convolutions as convolutions: oneDNN's convolution kernels
    pay an oversized pool differently from a GEMM of their im2col shape.
    """
    cpu = torch.device("cpu")
    setup_a = lambda: torch.set_num_threads(torch_threads)  # noqa: E731
    setup_b = lambda: torch.set_num_threads(cores)  # noqa: E731
    usable = [d for d in (shapes or []) if len(d) >= 5 and d[4] > 0 and _prod_elems(d) <= MAX_PROBE_ELEMENTS]
    counts = [d[4] / (2.0 * max(1, d[0]) * max(1, d[1]) * max(1, d[2]) * max(1, d[3])) for d in usable]
    half = time.perf_counter() + max(0.0, deadline - time.perf_counter()) / 2
    gemm_ratio: float | None = None
    own_gemms = bool(usable) and all(2.0 * d[0] * d[1] * d[2] * d[3] <= OWN_SHAPE_MAX_FLOPS for d in usable)
    if convolutions:
        conv_end = time.perf_counter() + max(0.0, half - time.perf_counter()) * CONV_SHARE_OF_GEMM_HALF
        # Every convolution or none: the one that does not fit is the slowest in the oversized pool.
        gemm_ratio = _weighted_ratio([(w.count, lambda share, w=w: w.make(dtype, share)) for w in convolutions],
                                     conv_end, setup_a, setup_b, THREADS_PROBE_CUTS, require_all=True)
        own_gemms = gemm_ratio is not None
    elif own_gemms:
        gemm_ratio = _weighted_ratio([(c, lambda _share, d=d: _gemm(d, dtype, cpu, gen)) for c, d in zip(counts, usable)],
                                     half, setup_a, setup_b)
    if gemm_ratio is None and not convolutions:
        # A square GEMM stands in for matrix products; it does not for convolutions (oneDNN's
        # convolution kernels pay an oversized pool differently): their ratio is then the run's own.
        def make(size: int) -> Pair:
            mm = _matmul(size, dtype, cpu, gen)
            return mm, mm

        square = _interleaved_ratio(CPU_MATMUL_SIZES, make, cpu, half, setup_a=setup_a, setup_b=setup_b)
        gemm_ratio = square.ratio if square is not None else None
        own_gemms = False
    # Without a GEMM ratio (calls too slow in the oversized pool for the slice) the elementwise half
    # still runs: the step model then prices the products from the run's own timing of them.
    outputs = [(c, _elementwise(d[0] * d[1] * d[2], gen, dtype)) for c, d in zip(counts, usable)] or \
        [(1.0, _elementwise(GENERIC_ACTIVATION_ELEMENTS, gen, dtype))]
    elementwise = _weighted_ratio([(c, lambda _share, fn=fn: fn) for c, fn in outputs], deadline, setup_a, setup_b)
    source = "own_shapes" if own_gemms else ("own_outputs" if usable else "generic")
    if gemm_ratio is None and elementwise is None:
        return None
    return ThreadsResult(gemm_ratio, elementwise, source)


# The spinner's program. A busy loop must not outlive the doctor: killed mid-probe (SIGKILL, the
# OOM killer) the doctor cannot kill its child, and an orphaned busy loop would hold a core of the
# user's machine until someone finds it. On Linux the child asks the kernel for SIGKILL when the
# thread that started it exits (PR_SET_PDEATHSIG = 1), then checks that its parent had not already
# gone before it asked; elsewhere it spins as it is.
SPINNER_CODE = """import os
try:
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)
except Exception:
    pass
if os.getppid() != {parent}:
    raise SystemExit(0)
while True:
    pass
"""


def spinner_code(parent_pid: int) -> str:
    """The busy loop's program for a child of ``parent_pid`` (:data:`SPINNER_CODE`)."""
    return SPINNER_CODE.format(parent=int(parent_pid))


class _Spinner:
    """A child process that keeps one core busy while running and is paused (SIGSTOP) otherwise."""

    def __init__(self) -> None:
        # -S: no site import, so the child spins within milliseconds; it inherits the job's affinity.
        self.proc = subprocess.Popen([sys.executable, "-S", "-c", spinner_code(os.getpid())],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.pause()

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def run(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


# Shares of a product's call the neighbour probe falls back to when the full call does not fit its
# slice. A call cut shorter than a scheduler time slice (a few ms) can lose a whole slice at its
# barrier, which the step's full call spreads over its arithmetic: the cuts stop at a quarter.
NEIGHBOUR_PROBE_CUTS = (1.0, 0.5, 0.25)


def _neighbour_probe(torch_threads: int, gen: torch.Generator, deadline: float,
                     work: list[ProductWork] | None = None,
                     dtype: torch.dtype = torch.float32) -> tuple[float, str] | None:
    """Time at ``torch_threads`` beside one spinning process over the same alone (>= 1 expected), and
    what was timed: the step's own products (``work``, in ``dtype``, combined by their count per
    step; a product whose pairs do not fit its share of the slice is left out, which biases the
    ratio low, toward fair sharing), else one square matmul ("square") where none fits.

    The stretch depends on the size of a call: a thread that loses its core mid-call leaves the
    others waiting at the call's barrier for up to a scheduler time slice, which a large GEMM
    spreads over its arithmetic and a small one does not. On a 2-core Cascade Lake, 2 threads of
    float64_worker_images.py's convolutions beside the spinner ran 2.3-5.5x slower, a square 1024
    GEMM 1.7-2.1x; the script's compute beside workers spinning as much CPU as its float64 ones
    slowed about as the first says. The step's own calls are what its compute pays.
    """
    if not hasattr(signal, "SIGSTOP"):
        return None  # no way to pause the neighbour between windows (Windows)
    cpu = torch.device("cpu")
    try:
        spinner = _Spinner()
    except OSError as exc:
        log.debug("neighbour probe skipped: %s", exc)
        return None
    try:
        torch.set_num_threads(torch_threads)
        # Contention is itself what varies here (which core the scheduler gives whom, for how long):
        # pairs spread more than a quiet GEMM's, so the median is kept whatever the spread.
        if work:
            own_end = time.perf_counter() + OWN_SHAPES_SHARE * max(0.0, deadline - time.perf_counter())
            # A product whose full call does not fit its slice is timed on a share of its rows
            # (NEIGHBOUR_PROBE_CUTS): a shorter call pays its barrier waits against less arithmetic,
            # so the ratio leans high, where none fitting at all left fair sharing: a 2 s budget
            # beside 0.57 s steps fitted none of MobileNet's products at batch 32 (15-37 ms a call),
            # and one loader worker was priced at 1.11-1.16x beside the 2-thread compute where it
            # measured 0.97x.
            ratio = _weighted_ratio([(w.count, lambda share, w=w: w.make(dtype, share)) for w in work], own_end,
                                    spinner.run, spinner.pause, NEIGHBOUR_PROBE_CUTS)
            if ratio is not None:
                return ratio, "own_shapes"

        def make(size: int) -> Pair:
            mm = _matmul(size, torch.float32, cpu, gen)
            return mm, mm

        result = _interleaved_ratio(CPU_MATMUL_SIZES, make, cpu, deadline, setup_a=spinner.run, setup_b=spinner.pause)
    finally:
        spinner.close()
    return (result.ratio, "square") if result is not None else None


# The spin probe's sleep after a parallel region. libgomp spins about 300,000 rounds (8.6 ms a
# thread on a 2-core Zen 4); Intel's OpenMP spins 200 ms (KMP_BLOCKTIME), which no window of a
# short probe sees the end of: a spin that fills the window is reported as unbounded.
SPIN_WINDOW_S = 0.04
SPIN_WINDOW_FULL = 0.8
SPIN_PAIRS = 5
SPIN_MIN_PAIRS = 3
SPIN_MATMUL_SIZE = 256


def _spin_probe(torch_threads: int, gen: torch.Generator, deadline: float) -> float | None:
    """Seconds each pool thread spins after a parallel region (``None``: unbounded or not measured).

    Each pair sleeps the main thread for :data:`SPIN_WINDOW_S` right after a parallel matmul, and
    again with the pool long asleep; the process's CPU during the first sleep beyond the second
    (this process's other threads: the monitor) is the pool's spin, spread over its other threads.
    """
    if torch_threads < 2:
        return None
    torch.set_num_threads(torch_threads)
    a = torch.randn(SPIN_MATMUL_SIZE, SPIN_MATMUL_SIZE, generator=gen)
    spins: list[float] = []
    for _ in range(SPIN_PAIRS):
        if len(spins) >= SPIN_MIN_PAIRS and time.perf_counter() + 3 * SPIN_WINDOW_S > deadline:
            break
        torch.mm(a, a)
        c0 = time.process_time()
        time.sleep(SPIN_WINDOW_S)
        after_region = time.process_time() - c0
        # The pool fell asleep during the first window (if its spin ends at all): the quiet window.
        time.sleep(SPIN_WINDOW_S)
        c0 = time.process_time()
        time.sleep(SPIN_WINDOW_S)
        quiet = time.process_time() - c0
        spins.append(max(0.0, after_region - quiet) / (torch_threads - 1))
    spin = statistics.median(spins)
    return None if spin >= SPIN_WINDOW_FULL * SPIN_WINDOW_S else spin


# The wake probe's op: an activation of GENERIC_ACTIVATION_ELEMENTS, split over the pool like a
# layer's output; it waits the run's median wait (at most WAKE_MAX_WAIT_S, so the probe stays within
# its slice), then waits doubling from WAKE_FIRST_WAIT_S, WAKE_REPS times each.
WAKE_FIRST_WAIT_S = 0.002
WAKE_MAX_WAIT_S = 0.25
WAKE_REPS = 3
WAKE_HISTORY_REPS = 3
# A ladder wait whose wake cost is at least this share of the run's wait's is the shortest wait that
# pays it: the cost is a step from an awake pool to sleeping threads on idle cores, not a slope.
WAKE_PAID_SHARE = 0.5


@dataclass(frozen=True)
class WakeResult:
    """The first parallel op's extra time after a wait as long as the run's, and the shortest wait
    of the probe's ladder that paid at least half of it."""

    wake_s: float
    min_wait_s: float


def _wake_probe(torch_threads: int, wait_s: float, gen: torch.Generator, deadline: float) -> WakeResult | None:
    """What the first parallel op after a ``wait_s`` sleep of the main thread costs beyond the same
    op run back to back (the pool's threads woken from sleep), at ``wait_s`` and at shorter waits.

    A trainer that waits for its data longer than its pool spins finds the pool asleep: libgomp's
    futex wake is microseconds on an idle bare-metal core, but a VM's idle vCPU is descheduled by the
    host and one measured 10 ms here (2-core Zen 4) after a 68 ms wait, nothing after 10 ms.
    ``min_wait_s``: of the waits doubling from :data:`WAKE_FIRST_WAIT_S`, the shortest that paid at
    least :data:`WAKE_PAID_SHARE` of the run's wait's cost, or the first not timed within the slice
    (taken to pay); the shorter ones all paid less. ``None`` with one thread.
    """
    if torch_threads < 2 or wait_s <= 0:
        return None
    torch.set_num_threads(torch_threads)
    fn = _elementwise(GENERIC_ACTIVATION_ELEMENTS, gen)
    # The pool as a training step leaves it: GEMMs and elementwise ops have run on its threads.
    a = torch.randn(SPIN_MATMUL_SIZE, SPIN_MATMUL_SIZE, generator=gen)
    for _ in range(5):
        torch.mm(a, a)
        fn()

    def warm_s() -> float:
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    def cost_after(w: float, reps: int, history: int = 0) -> float:
        extra = []
        for rep in range(history + reps):
            base = warm_s()
            time.sleep(w)
            t0 = time.perf_counter()
            fn()
            if rep >= history:
                extra.append(max(0.0, time.perf_counter() - t0 - base))
        return statistics.median(extra)

    # The run's own wait first: the cost the result must have. It is first repeated unrecorded: the
    # hypervisor adapts how long an idle vCPU polls before it halts to the recent idle periods (KVM's
    # halt polling), and the run's many waits had set it (a fresh probe's first long sleeps woke in
    # 0.3 ms, later ones in 10).
    top = min(wait_s, WAKE_MAX_WAIT_S)
    wake = cost_after(top, WAKE_REPS, WAKE_HISTORY_REPS)
    # Then doubling waits from the shortest, cheapest first, up to the first that pays half of it:
    # the cost is a step from an awake pool to a sleeping one.
    w = WAKE_FIRST_WAIT_S
    while w < top:
        if time.perf_counter() + WAKE_REPS * (w + 0.005) > deadline:
            break  # not measured from here up: taken to pay
        if cost_after(w, WAKE_REPS) >= WAKE_PAID_SHARE * wake:
            break
        w *= 2
    return WakeResult(wake, min(w, top))


def _overhead_probe(device: torch.device, deadline: float) -> float | None:
    x = torch.ones(4, device=device)
    y = torch.ones(4, device=device)

    def window() -> int:
        # The thread's CPU time, not the wall clock: the host cost of an op is CPU work, and a
        # loaded machine that preempts this thread would otherwise inflate it several times.
        start = time.thread_time_ns()
        for _ in range(OVERHEAD_OPS_PER_WINDOW):
            torch.add(x, y)
        return time.thread_time_ns() - start

    per_window: list[int] = []
    window()  # warm-up: dispatcher caches, allocator
    while len(per_window) < TARGET_PAIRS:
        t0 = time.perf_counter()
        per_window.append(window())
        if len(per_window) >= MIN_PAIRS and time.perf_counter() + (time.perf_counter() - t0) > deadline:
            break
    dev.synchronize(device)  # the launched work is finished before the next probe or the report
    return statistics.median(per_window) / OVERHEAD_OPS_PER_WINDOW


# The dtypes a step's matrix products may run in that the probes rebuild (others: fp32 stands in).
_PROBE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
                 "float64": torch.float64}


def free_cores(cores: int, outside_cores: float | None) -> int:
    """The usable cores other processes left free (whole cores, at least one): all of them unless
    they held at least ``MACHINE_BUSY_MIN_CORES`` (a machine's background is not another job)."""
    if outside_cores is None or outside_cores < MACHINE_BUSY_MIN_CORES:
        return cores
    return max(1, min(cores, math.floor(cores - outside_cores + 0.5)))


def run_probes(torch_threads: int, device: "torch.device | str", budget_s: float = 2.0,
               gemm_shapes: list[list[int]] | None = None, batch_rows: set[int] | None = None,
               matmul_shapes: list[list[int]] | None = None, conv_shapes: list[ConvShape] | None = None,
               gemm_dtype: str | None = None, data_wait_s: float | None = None,
               outside_cores: float | None = None, pageable_copy_bytes: int | None = None) -> ProbeResults:
    """Run the post-run probes within about ``budget_s`` seconds and return what they measured.

    ``torch_threads`` is the thread count the script ran with; ``gemm_shapes`` the step's own
    matrix products (``[batch, m, n, k, flops_per_step]``, convolutions as their im2col GEMM), which
    the batch-scaling and thread probes time; ``matmul_shapes`` and ``conv_shapes`` the plain matrix
    products and the convolutions by their own parameters, which the precision probe times (without
    them, ``gemm_shapes`` stand in); ``gemm_dtype`` the dtype the step's products ran in, which every
    probe of the step's own shapes uses (a step already in bf16 has no bf16 question: its products'
    FLOP rate is measured in bf16). ``batch_rows`` the sizes a dimension has when it is the
    micro-batch (its samples, its tokens), which the batch-scaling probe grows. ``data_wait_s``: the
    run's median wait for data per step, after which the wake probe times the pool's wake-up
    (CPU runs whose pool fits the cores and whose steps waited). ``outside_cores``: the cores other
    processes held during the run (median); where they held a real share (``MACHINE_BUSY_MIN_CORES``)
    and left fewer free cores than the pool's threads, the busy-threads probe times the step's work
    at the pool's count over at the free cores, beside them, and the rate and batch-scaling probes run
    at the free cores (what a barrier waiting on a shared core adds to each call is the other
    processes' cost, MACHINE_BUSY's, not the batch's). ``pageable_copy_bytes``: the mean size of the
    run's copies to the GPU from pageable memory, which the pinned probe copies both ways. Probes that do not
    apply (bf16 on a CPU without native bf16, threads when the script did not oversubscribe) are
    left ``None``.
    """
    if budget_s <= 0:
        raise ValueError(f"budget_s must be > 0, got {budget_s}")
    device = dev.resolve_device(device)
    cores = dev.usable_cores()
    job_dtype = _PROBE_DTYPES.get(gemm_dtype or "float32", torch.float32)
    planned = ["overhead"]
    if job_dtype == torch.float32 and (dev.is_cuda(device) or dev.cpu_has_native_bf16()):
        planned.append("bf16")
    elif gemm_shapes or matmul_shapes or conv_shapes:
        # No bf16 question to answer, but the FLOP rate of the step's own products still tells which
        # share of forward/backward is arithmetic (SMALL_BATCH's op-bound test, MFU): time it alone.
        planned.append("rate")
    if gemm_shapes and batch_rows:
        planned.append("batch_scale")
    if torch_threads > cores:
        planned.append("threads")
    free = free_cores(cores, outside_cores)
    # The pool the rate and batch-scaling probes time: no more threads than cores, and where other
    # processes left fewer cores than a pool that fits them, the free ones (an oversized pool beside
    # them keeps the cores: THREAD_OVERSUBSCRIPTION's fix is priced at one thread per core).
    pool = max(1, min(torch_threads, cores))
    if not dev.is_cuda(device) and free < torch_threads <= cores:
        planned.append("busy_threads")
        pool = free
    if dev.is_cuda(device) and pageable_copy_bytes:
        planned.append("pinned")
    if not dev.is_cuda(device):
        planned.append("neighbour")
        if 1 < torch_threads <= cores:
            planned.append("spin")
            if data_wait_s is not None and data_wait_s >= WAKE_FIRST_WAIT_S:
                planned.append("wake")
    total_share = sum(_SHARES[p] for p in planned)
    if "busy_threads" in planned:
        # Its own time on top of the budget, not the others' slices; and the probes that time the
        # step's products at the free cores' threads get the longer calls' time (up to threads/free
        # times the pool's): a batch-scaling probe starved beside busy processes dropped SMALL_BATCH
        # from the run (its 8x-batch calls did not fit twice in the slice).
        budget_s *= total_share / (total_share - _SHARES["busy_threads"]) * torch_threads / free
    out = ProbeResults()
    saved_threads = torch.get_num_threads()
    gen = torch.Generator(device=device)
    gen.manual_seed(_SEED)
    cpu_gen = gen if device.type == "cpu" else torch.Generator().manual_seed(_SEED)
    if matmul_shapes is None and conv_shapes is None:
        matmul_shapes = gemm_shapes
    work = own_products(matmul_shapes or [], conv_shapes or [], device, gen)
    start = time.perf_counter()
    spent_share = 0.0
    try:
        with torch.no_grad():
            for name in ("bf16", "rate", "batch_scale", "threads", "busy_threads", "neighbour", "spin", "wake",
                         "pinned", "overhead"):
                if name not in planned:
                    continue
                spent_share += _SHARES[name] / total_share
                # Each probe keeps its own slice even when one before it overran (a first call of a
                # large GEMM cannot be cut short): later probes are not starved into no answer.
                deadline = max(start + budget_s * spent_share,
                               time.perf_counter() + budget_s * _SHARES[name] / total_share)
                # The square GEMM that stands in where none of the step's own products could be timed
                # keeps the rest of the slice even when they overran it (a convolution's first calls
                # build its kernels, which no deadline cuts short): a slow machine still gets a rate.
                fallback_s = (1.0 - OWN_SHAPES_SHARE) * max(0.0, deadline - time.perf_counter())
                if name == "bf16":
                    # The step's own products first, within most of the slice; one square GEMM when
                    # none could be timed (a compiled model's products are not counted).
                    own_end = time.perf_counter() + OWN_SHAPES_SHARE * max(0.0, deadline - time.perf_counter())
                    own = _own_shapes_probe(work, device, own_end) if work else None
                    if own is not None:
                        out.bf16_speedup = own.ratio
                        out.bf16_probe_source = "own_shapes"
                        out.bf16_probe_shapes = own.shapes
                        out.bf16_probe_disturbed = own.disturbed
                        out.fp32_matmul_flops_per_s = own.fp32_flops_per_s
                    else:
                        bf16 = _bf16_probe(device, gen, max(deadline, time.perf_counter() + fallback_s))
                        if bf16 is not None:
                            out.bf16_speedup = bf16.ratio
                            out.bf16_probe_shape = [bf16.size] * 3
                            out.fp32_matmul_flops_per_s = 2 * bf16.size**3 / bf16.a_s
                            out.bf16_probe_disturbed = bf16.spread > PROBE_SPREAD_MAX
                    out.matmul_flops_per_s = out.fp32_matmul_flops_per_s
                    out.matmul_rate_threads = torch.get_num_threads()
                elif name == "rate":
                    # At no more threads than cores, as batch_scale: the FLOP rate is the cores'; an
                    # oversized pool's calls are THREAD_OVERSUBSCRIPTION's to price (and would take
                    # that probe's budget: 0.3 s a convolution at 16 threads on 2 cores).
                    torch.set_num_threads(pool)
                    own_end = time.perf_counter() + OWN_SHAPES_SHARE * max(0.0, deadline - time.perf_counter())
                    rate = _own_shapes_probe(work, device, own_end, high=job_dtype, low=job_dtype) if work else None
                    flops_per_s = rate.fp32_flops_per_s if rate is not None else None
                    if flops_per_s is None:
                        # The step's products did not fit the budget (they are large, so compute-bound
                        # like a square GEMM): the square GEMM's rate stands in.
                        flops_per_s = _square_fp32_rate(device, gen, max(deadline, time.perf_counter() + fallback_s),
                                                        job_dtype)
                    out.matmul_rate_threads = torch.get_num_threads()
                    torch.set_num_threads(saved_threads)
                    out.matmul_flops_per_s = flops_per_s
                    if job_dtype == torch.float32:
                        out.fp32_matmul_flops_per_s = flops_per_s
                elif name == "batch_scale":
                    # At no more threads than cores: the per-call cost an oversized pool adds is
                    # THREAD_OVERSUBSCRIPTION's (one cause, one finding), not the batch's.
                    torch.set_num_threads(pool)
                    scale = _batch_scale_probe(gemm_shapes or [], batch_rows or set(), device, gen, deadline, job_dtype)
                    torch.set_num_threads(saved_threads)
                    if scale is not None:
                        out.gemm_fixed_share = scale.fixed_share
                        out.gemm_scale_probe = [BATCH_SCALE_GROWTH, scale.shapes]
                        out.gemm_scale_disturbed = scale.disturbed
                elif name == "threads":
                    with_convs = work if any(w.convolution for w in work) and device.type == "cpu" else None
                    threads = _threads_probe(torch_threads, cores, cpu_gen, deadline,
                                             gemm_shapes if device.type == "cpu" else None,
                                             job_dtype if device.type == "cpu" else torch.float32, with_convs)
                    if threads is not None:
                        out.threads_speedup = threads.gemm_ratio
                        out.threads_elementwise_speedup = threads.elementwise_ratio
                        out.threads_probe_source = threads.source
                    out.threads_probe = [torch_threads, cores]
                elif name == "busy_threads":
                    busy = _threads_probe(torch_threads, free, cpu_gen, deadline, gemm_shapes, job_dtype,
                                          work if any(w.convolution for w in work) else None)
                    if busy is not None:
                        out.busy_threads_speedup = busy.gemm_ratio
                        out.busy_threads_elementwise_speedup = busy.elementwise_ratio
                    out.busy_threads_probe = [torch_threads, free]
                elif name == "neighbour":
                    neighbour = _neighbour_probe(torch_threads, cpu_gen, deadline, work, job_dtype)
                    if neighbour is not None:
                        out.neighbour_stretch, out.neighbour_probe_source = neighbour
                    out.neighbour_probe = [torch_threads, cores]
                elif name == "spin":
                    out.pool_spin_s = _spin_probe(torch_threads, cpu_gen, deadline)
                    out.pool_spin_probe = [torch_threads, round(SPIN_WINDOW_S * 1e3)]
                elif name == "wake":
                    wake = _wake_probe(torch_threads, float(data_wait_s or 0.0), cpu_gen, deadline)
                    if wake is not None:
                        out.pool_wake_s = wake.wake_s
                        out.pool_wake_min_wait_s = wake.min_wait_s
                    out.pool_wake_probe = [torch_threads, round(float(data_wait_s or 0.0) * 1e3)]
                elif name == "pinned":
                    pinned = _pinned_copy_probe(int(pageable_copy_bytes or 0), device, deadline)
                    if pinned is not None:
                        out.pinned_copy_speedup = pinned.ratio
                        out.pinned_copy_probe_bytes = pinned.size
                else:
                    out.op_overhead_ns = _overhead_probe(device, deadline)
    finally:
        torch.set_num_threads(saved_threads)
    log.debug("probes took %.2f s: %s", time.perf_counter() - start, out)
    return out
