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

import logging
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch

from stave import device as dev
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
# Library start-up excused from a probe's budget at most (see _interleaved_ratio).
MAX_STARTUP_S = 2.0
# Budget shares of the probes (renormalized over those that run). The thread probe, which only runs
# when the pool exceeds the cores, switches thread pools (the first calls after a switch are slow),
# times each of the step's GEMM shapes and their outputs at two thread counts, and one call of an
# oversubscribed pool takes several times its normal time: it gets the largest share.
_SHARES = {"bf16": 0.45, "fp32": 0.45, "batch_scale": 0.3, "threads": 1.2, "neighbour": 0.3, "overhead": 0.15}
# The batch-scaling probe times each of the step's GEMM shapes at its batch rows and at this many
# times them: wide enough apart that the line through the two times separates the per-call cost
# from the per-row cost, while the larger operand stays a training-sized GEMM. 8x is also a
# typical growth SMALL_BATCH names (it doubles while a doubling gains 5 %, up to 32x).
BATCH_SCALE_GROWTH = 8
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
    sizes: tuple[int, ...],
    make: Callable[[int], Pair],
    device: torch.device,
    deadline: float,
    setup_a: Callable[[], None] | None = None,
    setup_b: Callable[[], None] | None = None,
) -> RatioResult | None:
    """Median over A/B pairs of time(A) / time(B), the problem size it was measured at, and each
    side's median seconds per call.

    ``make(size)`` builds the two sides. The largest of ``sizes`` whose MIN_PAIRS pairs fit before
    ``deadline`` is used (a slow or loaded machine gets a smaller GEMM rather than no answer);
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
    a, b = make(sizes[0])
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
        if left >= MIN_PAIRS * (2 + untimed) * per_call * (size / sizes[0]) ** 3:
            break
    else:
        log.debug("probe skipped: %.3f s per call does not fit %.3f s left", per_call, left)
        return None
    if size != sizes[0]:
        a, b = make(size)
        per_call = max(run(a, setup_a, 1), run(b, setup_b, 1), 1e-9)
        left = deadline - time.perf_counter()
    reps = max(1, min(MAX_REPS, int((left / TARGET_PAIRS / per_call - untimed) / 2)))
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


def _square_fp32_rate(device: torch.device, gen: torch.Generator, deadline: float) -> float | None:
    """fp32 FLOP/s of one square GEMM (the largest of the sizes that fits before ``deadline``)."""
    sizes = CPU_MATMUL_SIZES if device.type == "cpu" else GPU_MATMUL_SIZES

    def make(size: int) -> Pair:
        mm = _matmul(size, torch.float32, device, gen)
        return mm, mm

    result = _interleaved_ratio(sizes, make, device, deadline)
    return 2.0 * result.size**3 / result.a_s if result is not None and result.a_s > 0 else None


def _own_shapes_probe(shapes: list[list[int]], device: torch.device, gen: torch.Generator,
                      deadline: float, low: torch.dtype = torch.bfloat16) -> OwnShapesResult | None:
    """Time each of the step's own GEMM shapes in fp32 and bf16 (interleaved) and combine them by
    their share of the step: ``sum(count x t_fp32) / sum(count x t_bf16)``.

    A shape whose pairs spread more than :data:`PROBE_SPREAD_MAX` is timed once more (the machine
    moved under it); if it spreads again the result is marked ``disturbed``, never silently used.
    ``low=torch.float32`` times fp32 against itself: only the fp32 rate is wanted (no native bf16).
    """
    usable = [s for s in shapes if len(s) >= 5 and s[4] > 0 and _prod_elems(s) <= MAX_PROBE_ELEMENTS]
    if not usable:
        return None
    t32 = t16 = flops = 0.0
    disturbed = False
    timed: list[list[int]] = []
    for i, dims in enumerate(usable):
        slice_s = max(0.0, deadline - time.perf_counter()) / (len(usable) - i)
        slice_end = time.perf_counter() + slice_s

        def make(_size: int, dims: list[int] = dims) -> Pair:
            return _gemm(dims, torch.float32, device, gen), _gemm(dims, low, device, gen)

        result = _interleaved_ratio((1,), make, device, slice_end)
        if result is not None and result.spread > PROBE_SPREAD_MAX:
            again = _interleaved_ratio((1,), make, device, time.perf_counter() + slice_s)
            if again is not None and again.spread <= PROBE_SPREAD_MAX:
                result = again
            else:
                disturbed = True
        if result is None:
            continue
        batch, m, n, k, step_flops = (int(v) for v in dims[:5])
        count = step_flops / (2.0 * batch * m * n * k)
        t32 += count * result.a_s
        t16 += count * result.b_s
        flops += step_flops
        timed.append(list(dims))
    if t16 <= 0 or t32 <= 0:
        return None
    return OwnShapesResult(ratio=t32 / t16, fp32_flops_per_s=flops / t32, shapes=timed, disturbed=disturbed)


@dataclass(frozen=True)
class BatchScaleResult:
    """Share of the step's own GEMM time (count-weighted) that does not grow with the batch."""

    fixed_share: float
    shapes: int


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
                       gen: torch.Generator, deadline: float) -> BatchScaleResult | None:
    """Time each of the step's own GEMM shapes (fp32) at its batch rows and at
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
    for i, (dims, big) in enumerate(planned):
        slice_s = max(0.0, deadline - time.perf_counter()) / (len(planned) - i)

        def make(_size: int, dims: list[int] = dims, big: list[int] | None = big) -> Pair:
            return _gemm(dims, torch.float32, device, gen), _gemm(big or dims, torch.float32, device, gen)

        result = _interleaved_ratio((1,), make, device, time.perf_counter() + slice_s)
        if result is not None and result.spread > PROBE_SPREAD_MAX:
            result = _interleaved_ratio((1,), make, device, time.perf_counter() + slice_s)
        if result is None or result.spread > PROBE_SPREAD_MAX:
            continue
        b, m, n, k, step_flops = (int(v) for v in dims[:5])
        per_step_s = step_flops / (2.0 * b * m * n * k) * result.a_s
        total += per_step_s
        if big is not None:
            fixed += per_step_s * fixed_share_of_call(result.ratio, BATCH_SCALE_GROWTH)
            timed += 1
    if total <= 0 or not timed:
        return None
    return BatchScaleResult(fixed_share=fixed / total, shapes=timed)


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

    gemm_ratio: float
    elementwise_ratio: float | None
    source: str


def _elementwise(elements: int, gen: torch.Generator) -> Callable[[], object]:
    x = torch.rand(max(1, int(elements)), generator=gen)
    # An activation then a residual add: the memory-bound ops between a model's GEMMs, each split
    # over the intra-op threads, each paying their wake-up and barrier.
    return lambda: torch.nn.functional.gelu(x).add_(x)


# A GEMM of more FLOPs than a 512-cube one is compute-bound on any CPU: its thread-count ratio is
# the square probe's, which also fits the budget where the step's own (larger) shapes would not.
OWN_SHAPE_MAX_FLOPS = 2 * 512**3


def _weighted_ratio(work: list[tuple[float, Callable[[], object]]], deadline: float,
                    setup_a: Callable[[], None], setup_b: Callable[[], None]) -> float | None:
    """``sum(count x time at A) / sum(count x time at B)`` over ``(count, fn)``, interleaved, each
    within an equal slice of what is left before ``deadline``; None when none fits."""
    cpu = torch.device("cpu")
    many = few = 0.0
    for i, (count, fn) in enumerate(work):
        slice_end = time.perf_counter() + max(0.0, deadline - time.perf_counter()) / (len(work) - i)
        result = _interleaved_ratio((1,), lambda _size, fn=fn: (fn, fn), cpu, slice_end,
                                    setup_a=setup_a, setup_b=setup_b)
        if result is not None:
            many += count * result.a_s
            few += count * result.b_s
    return many / few if many > 0 and few > 0 else None


def _threads_probe(torch_threads: int, cores: int, gen: torch.Generator, deadline: float,
                   shapes: list[list[int]] | None = None) -> ThreadsResult | None:
    """The same work at ``torch_threads`` over at ``cores`` threads: the step's GEMMs, and the
    elementwise ops on their outputs (half the budget each).

    With the step's own GEMM shapes, an activation and residual add over each one's output is
    timed both ways (interleaved), combined by each shape's count per step, and so are the GEMMs
    themselves when all are small enough to fit (:data:`OWN_SHAPE_MAX_FLOPS`; larger ones are
    compute-bound like the square probe, which then stands in). A GEMM hides the threads' wake-ups
    and barrier behind its arithmetic, a memory-bound op on the same output does not. Without
    shapes one square GEMM and one layer-sized activation stand in ("generic").
    """
    cpu = torch.device("cpu")
    setup_a = lambda: torch.set_num_threads(torch_threads)  # noqa: E731
    setup_b = lambda: torch.set_num_threads(cores)  # noqa: E731
    usable = [d for d in (shapes or []) if len(d) >= 5 and d[4] > 0 and _prod_elems(d) <= MAX_PROBE_ELEMENTS]
    counts = [d[4] / (2.0 * max(1, d[0]) * max(1, d[1]) * max(1, d[2]) * max(1, d[3])) for d in usable]
    half = time.perf_counter() + max(0.0, deadline - time.perf_counter()) / 2
    gemm_ratio: float | None = None
    own_gemms = bool(usable) and all(2.0 * d[0] * d[1] * d[2] * d[3] <= OWN_SHAPE_MAX_FLOPS for d in usable)
    if own_gemms:
        gemm_ratio = _weighted_ratio([(c, _gemm(d, torch.float32, cpu, gen)) for c, d in zip(counts, usable)],
                                     half, setup_a, setup_b)
    if gemm_ratio is None:
        def make(size: int) -> Pair:
            mm = _matmul(size, torch.float32, cpu, gen)
            return mm, mm

        square = _interleaved_ratio(CPU_MATMUL_SIZES, make, cpu, half, setup_a=setup_a, setup_b=setup_b)
        gemm_ratio = square.ratio if square is not None else None
        own_gemms = False
    if gemm_ratio is None:
        return None
    outputs = [(c, _elementwise(d[0] * d[1] * d[2], gen)) for c, d in zip(counts, usable)] or \
        [(1.0, _elementwise(GENERIC_ACTIVATION_ELEMENTS, gen))]
    elementwise = _weighted_ratio(outputs, deadline, setup_a, setup_b)
    source = "own_shapes" if own_gemms else ("own_outputs" if usable else "generic")
    return ThreadsResult(gemm_ratio, elementwise, source)


class _Spinner:
    """A child process that keeps one core busy while running and is paused (SIGSTOP) otherwise."""

    def __init__(self) -> None:
        # -S: no site import, so the child spins within milliseconds; it inherits the job's affinity.
        self.proc = subprocess.Popen([sys.executable, "-S", "-c", "while True: pass"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.pause()

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def run(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _neighbour_probe(torch_threads: int, gen: torch.Generator, deadline: float) -> float | None:
    """Matmul time at ``torch_threads`` beside one spinning process over the same alone (>= 1 expected)."""
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

        def make(size: int) -> Pair:
            mm = _matmul(size, torch.float32, cpu, gen)
            return mm, mm

        result = _interleaved_ratio(CPU_MATMUL_SIZES, make, cpu, deadline, setup_a=spinner.run, setup_b=spinner.pause)
    finally:
        spinner.close()
    # Contention is itself what varies here (which core the scheduler gives whom, for how long):
    # pairs spread more than a quiet GEMM's, so the median is kept whatever the spread.
    return result.ratio if result is not None else None


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


def run_probes(torch_threads: int, device: "torch.device | str", budget_s: float = 2.0,
               gemm_shapes: list[list[int]] | None = None, batch_rows: set[int] | None = None) -> ProbeResults:
    """Run the post-run probes within about ``budget_s`` seconds and return what they measured.

    ``torch_threads`` is the thread count the script ran with; ``gemm_shapes`` the step's own
    matrix products (``[batch, m, n, k, flops_per_step]``), which the precision probe times instead
    of one generic GEMM when given; ``batch_rows`` the sizes a dimension has when it is the
    micro-batch (its samples, its tokens), which the batch-scaling probe grows. Probes that do not apply (bf16 on a
    CPU without native bf16, threads when the script did not oversubscribe) are left ``None``.
    """
    if budget_s <= 0:
        raise ValueError(f"budget_s must be > 0, got {budget_s}")
    device = dev.resolve_device(device)
    cores = dev.usable_cores()
    planned = ["overhead"]
    if dev.is_cuda(device) or dev.cpu_has_native_bf16():
        planned.append("bf16")
    elif gemm_shapes:
        # No bf16 question to answer, but the fp32 rate of the step's own GEMMs still tells which
        # share of forward/backward is arithmetic (SMALL_BATCH's op-bound test): time fp32 alone.
        planned.append("fp32")
    if gemm_shapes and batch_rows:
        planned.append("batch_scale")
    if torch_threads > cores:
        planned.append("threads")
    if not dev.is_cuda(device):
        planned.append("neighbour")
    total_share = sum(_SHARES[p] for p in planned)
    out = ProbeResults()
    saved_threads = torch.get_num_threads()
    gen = torch.Generator(device=device)
    gen.manual_seed(_SEED)
    cpu_gen = gen if device.type == "cpu" else torch.Generator().manual_seed(_SEED)
    start = time.perf_counter()
    spent_share = 0.0
    try:
        with torch.no_grad():
            for name in ("bf16", "fp32", "batch_scale", "threads", "neighbour", "overhead"):
                if name not in planned:
                    continue
                spent_share += _SHARES[name] / total_share
                # Each probe keeps its own slice even when one before it overran (a first call of a
                # large GEMM cannot be cut short): later probes are not starved into no answer.
                deadline = max(start + budget_s * spent_share,
                               time.perf_counter() + budget_s * _SHARES[name] / total_share)
                own = _own_shapes_probe(gemm_shapes, device, gen, deadline) if name == "bf16" and gemm_shapes else None
                if own is not None:
                    out.bf16_speedup = own.ratio
                    out.bf16_probe_source = "own_shapes"
                    out.bf16_probe_shapes = own.shapes
                    out.bf16_probe_disturbed = own.disturbed
                    out.fp32_matmul_flops_per_s = own.fp32_flops_per_s
                elif name == "fp32":
                    half = time.perf_counter() + max(0.0, deadline - time.perf_counter()) / 2
                    rate = _own_shapes_probe(gemm_shapes or [], device, gen, half, low=torch.float32)
                    out.fp32_matmul_flops_per_s = rate.fp32_flops_per_s if rate is not None else None
                    if rate is None:
                        # The step's shapes did not fit the budget (they are large, so compute-bound
                        # like a square GEMM): the square GEMM's rate stands in.
                        out.fp32_matmul_flops_per_s = _square_fp32_rate(device, gen, deadline)
                elif name == "bf16":
                    bf16 = _bf16_probe(device, gen, deadline)
                    if bf16 is not None:
                        out.bf16_speedup = bf16.ratio
                        out.bf16_probe_shape = [bf16.size] * 3
                        out.fp32_matmul_flops_per_s = 2 * bf16.size**3 / bf16.a_s
                        out.bf16_probe_disturbed = bf16.spread > PROBE_SPREAD_MAX
                elif name == "batch_scale":
                    # At no more threads than cores: the per-call cost an oversized pool adds is
                    # THREAD_OVERSUBSCRIPTION's (one cause, one finding), not the batch's.
                    torch.set_num_threads(max(1, min(torch_threads, cores)))
                    scale = _batch_scale_probe(gemm_shapes or [], batch_rows or set(), device, gen, deadline)
                    torch.set_num_threads(saved_threads)
                    if scale is not None:
                        out.gemm_fixed_share = scale.fixed_share
                        out.gemm_scale_probe = [BATCH_SCALE_GROWTH, scale.shapes]
                elif name == "threads":
                    threads = _threads_probe(torch_threads, cores, cpu_gen, deadline,
                                             gemm_shapes if device.type == "cpu" else None)
                    if threads is not None:
                        out.threads_speedup = threads.gemm_ratio
                        out.threads_elementwise_speedup = threads.elementwise_ratio
                        out.threads_probe_source = threads.source
                    out.threads_probe = [torch_threads, cores]
                elif name == "neighbour":
                    out.neighbour_stretch = _neighbour_probe(torch_threads, cpu_gen, deadline)
                    out.neighbour_probe = [torch_threads, cores]
                else:
                    out.op_overhead_ns = _overhead_probe(device, deadline)
    finally:
        torch.set_num_threads(saved_threads)
    log.debug("probes took %.2f s: %s", time.perf_counter() - start, out)
    return out
