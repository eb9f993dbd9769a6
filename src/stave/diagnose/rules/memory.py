"""MEMORY_GROWTH and HOST_MEMORY_PRESSURE: memory that only goes up, and a host short of it.

MEMORY_GROWTH: process memory (RSS, or CUDA allocated memory on a GPU) that grows by about the same
bytes every step is something kept alive across steps: the classic is ``total_loss += loss``,
which chains every step's autograd graph onto the next. It ends in an out-of-memory kill.
HOST_MEMORY_PRESSURE: the process pages to swap or stalls on memory reclaim, or re-reads from disk
a dataset that would fit in the page cache.
"""

from __future__ import annotations

import statistics

from stave.analyze.host import HostSummary, summarize_host
from stave.analyze.loading import loading_bound
from stave.analyze.trend import MemoryTrend, memory_trend
from stave.analyze.step_inputs import step_inputs
from stave.analyze.step_model import estimate
from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.inputs import DoctorInput
from stave.diagnose.rules._helpers import REPORT_MIN_SPEEDUP, make_finding
from stave.measure.record import RunRecord

# A leak adds about the same bytes every step, so memory against step index fits a line; warm-up
# caches and allocator noise do not.
MEMORY_GROWTH_MIN_R2 = 0.8
# A steady loop's RSS moves by tens of KiB over hundreds of steps (28 KiB over 280 steps measured
# on the planted healthy model); 4 MiB, two CUDA caching-allocator blocks, is well above that noise.
MEMORY_GROWTH_MIN_BYTES = 4 * 2**20
# The second half of the run must still grow at three quarters of the first half's rate. A leak
# adds the same bytes every step, so its halves agree up to sampling noise (0.99 on the planted
# leak); growth that slows by a quarter or more within one run is a cache, an allocator arena or
# lazily touched library pages filling up, which flattens on its own (a healthy IterableDataset
# run with two workers measured 119 KiB/step, then 60 KiB/step, over its first two seconds).
MEMORY_GROWTH_SUSTAINED = 0.75
# RSS must also grow by a tenth of where it started. A process's RSS rises in its first seconds
# and minutes without any leak (library pages touched lazily, allocator arenas, the workers'
# copy-on-write pages counted again in each): a healthy two-worker IterableDataset script's process
# tree grew 31 MB, 2.4% of its 1.3 GB, in its first 2 s of steps. A leak soon outgrows that; CUDA
# allocated memory counts live tensors only and has no such warm-up, so it is exempt.
RSS_GROWTH_MIN_SHARE = 0.10
# Each batch shape met for the first time gets its own kernels (oneDNN keeps 1,024 primitives by
# default) and allocator blocks, and each frame torch.compile compiles adds its code and guards, so
# with batches of varying shape host memory grows with the shapes and graphs a run has seen and
# stops once they are all seen; a leak grows at every step. The steps that fill no cache (repeat a
# shape, compile nothing) tell them apart: padded_longest_healthy (each batch padded to its own
# longest) grew RSS 12 MB a step over 22 steps, 0.0 MB at each of the three steps that repeated a
# token count. Such steps whose median growth is under a quarter of the fitted rate, at least this
# many of them, show a cache filling up, not a leak. The median, not the mean: a leak adds its bytes
# at every step, so most steady steps show it; freed blocks the allocator keeps (glibc raises its
# mmap threshold after a large free, so later large tensors come from a heap that does not shrink)
# make RSS jump at a few steps whatever their shape: compile_varlen's five steady steps grew 0, 7.8,
# 0, 7.0 and 0 MB in one run (a mean of 0.49 of the rate, named a leak) and 0-0.1 MB in the next.
REPEATED_SHAPE_MIN_STEPS = 3
REPEATED_SHAPE_MAX_GROWTH = 0.25
# Memory running out within a day at the measured rate: an overnight run would be killed.
MEMORY_CRITICAL_HORIZON_S = 24 * 3600.0

# Paging in or out in a quarter of the samples is sustained swapping, not a one-off.
SWAP_ACTIVE_MIN_SHARE = 0.25
# Some task stalled on memory reclaim a tenth of the time (PSI "some"): the kernel is struggling.
PSI_MEMORY_MIN_PCT = 10.0
# A dataset "fits" when it takes at most half of the available memory: the page cache has to
# hold it next to everything else the job touches.
DATASET_FITS_SHARE = 0.5
# Reading at least half the dataset's bytes from disk while measured means it is not being served
# from the page cache.
DATASET_REREAD_MIN_SHARE = 0.5
# As in the data rules: hiding a wait under a tenth of the step cannot reach a warning.
DATA_WAIT_MIN_SHARE = 0.10


def _leak(record_trend: MemoryTrend | None) -> bool:
    t = record_trend
    if t is None or t.bytes_per_step <= 0:
        return False
    if t.counter == "rss_bytes" and t.growth_bytes < RSS_GROWTH_MIN_SHARE * max(t.start_bytes, 0.0):
        return False
    return (
        t.r_squared >= MEMORY_GROWTH_MIN_R2
        and t.growth_bytes >= MEMORY_GROWTH_MIN_BYTES
        and t.second_half_bytes_per_step >= MEMORY_GROWTH_SUSTAINED * t.first_half_bytes_per_step
    )


def growth_at_steady_steps(record: RunRecord) -> tuple[float, int] | None:
    """Median RSS growth of the counted steps that filled no cache, and how many there were: steps that
    neither met a batch shape (its tokens fed) for the first time nor compiled a frame. A step that
    recompiled a shape seen before still compiled (dynamo's guards fail on the order of shapes too).
    ``None`` when the run shows neither kind of cache-filling step (no token counts, nothing compiled
    after warm-up) or carries no per-step RSS."""
    seen: set[int] = set()
    growth: list[float] = []
    prev_rss: int | None = None
    markers = False
    for step in record.steps:
        new_shape = False
        if step.tokens > 0:
            markers = True
            new_shape = step.tokens not in seen
            seen.add(step.tokens)
        compiled = step.compiled_frames > 0
        markers = markers or (compiled and step.counted)
        if step.counted and not new_shape and not compiled and prev_rss and step.rss_bytes:
            growth.append(float(step.rss_bytes - prev_rss))
        prev_rss = step.rss_bytes
    if not markers:
        return None
    return (statistics.median(growth) if growth else 0.0), len(growth)


def _shape_cache(record: RunRecord, trend: MemoryTrend) -> bool:
    """RSS grew with new batch shapes or compiled frames only (see :data:`REPEATED_SHAPE_MAX_GROWTH`)."""
    steady = growth_at_steady_steps(record)
    if steady is None or steady[1] < REPEATED_SHAPE_MIN_STEPS:
        return False
    return steady[0] < REPEATED_SHAPE_MAX_GROWTH * trend.bytes_per_step


@rule("MEMORY_GROWTH", kind="doctor")
def memory_growth(inp: DoctorInput) -> Finding | None:
    """Memory grows linearly with the step count."""
    record = inp.record
    host = summarize_host(record)
    candidates: list[tuple[MemoryTrend, float | None, str]] = []
    rss = memory_trend(record, "rss_bytes")
    if _leak(rss) and rss is not None and not _shape_cache(record, rss):
        candidates.append((rss, host.mem_available_min_bytes, "host memory (RSS)"))
    cuda = memory_trend(record, "cuda_allocated_bytes")
    if _leak(cuda) and cuda is not None:
        total = record.config.device_total_memory_bytes
        free = total - cuda.end_bytes if total else None
        candidates.append((cuda, free, "GPU memory (allocated)"))
    if not candidates:
        return None

    def seconds_left(c: tuple[MemoryTrend, float | None, str]) -> float:
        trend, free, _ = c
        if free is None or trend.bytes_per_s <= 0:
            return float("inf")
        return max(0.0, free) / trend.bytes_per_s

    trend, free, what = min(candidates, key=seconds_left)
    left_s = seconds_left((trend, free, what))
    critical = left_s <= MEMORY_CRITICAL_HORIZON_S
    when = f"; at this rate it runs out in {left_s / 3600:.1f} h" if left_s != float("inf") else ""
    return make_finding(
        "MEMORY_GROWTH",
        1.0,
        f"{what} grows {trend.bytes_per_step / 1024:.0f} KiB every step{when}",
        {
            "counter": trend.counter,
            "bytes_per_step": trend.bytes_per_step,
            "bytes_per_s": trend.bytes_per_s,
            "growth_bytes": trend.growth_bytes,
            "steps_spanned": trend.steps_spanned,
            "r_squared": trend.r_squared,
            "first_half_bytes_per_step": trend.first_half_bytes_per_step,
            "second_half_bytes_per_step": trend.second_half_bytes_per_step,
            "free_bytes": free,
            "seconds_until_out_of_memory": left_s if left_s != float("inf") else None,
        },
        "# Keep numbers, not tensors, across steps: a tensor that required grad drags its whole\n"
        "# autograd graph (and every earlier step's, chained) along with it.\n"
        "total_loss += loss.item()        # instead of: total_loss += loss\n"
        "history.append(output.detach())  # instead of: history.append(output)",
        explanation=(
            "Memory against step index is a straight line that does not flatten, which is what an "
            "object kept alive across steps looks like. About risk, not speed: est_speedup 1.0."
        ),
        severity="critical" if critical else "warning",
    )


def _swapping(host: HostSummary) -> bool:
    swap = host.swap_active_share is not None and host.swap_active_share >= SWAP_ACTIVE_MIN_SHARE
    psi = host.psi_memory_some_pct is not None and host.psi_memory_some_pct >= PSI_MEMORY_MIN_PCT
    return swap or psi


@rule("HOST_MEMORY_PRESSURE", kind="doctor")
def host_memory_pressure(inp: DoctorInput) -> Finding | None:
    """The host swaps, or re-reads from disk a dataset that would fit in its page cache."""
    record, summary = inp.record, inp.summary
    host = summarize_host(record)
    if summary.steps == 0:
        return None
    if _swapping(host):
        psi = host.psi_memory_some_pct
        # PSI "some" is the share of wall time at least one task waited on memory: the most that
        # enough memory could give back.
        est = 1.0 / (1.0 - min(psi, 90.0) / 100.0) if psi is not None else 1.0
        return make_finding(
            "HOST_MEMORY_PRESSURE",
            est,
            "The host is short of memory: the job swaps or stalls on memory reclaim",
            {
                "swap_active_share": host.swap_active_share,
                "swap_in_bytes_per_s": host.swap_in_bytes_per_s,
                "swap_out_bytes_per_s": host.swap_out_bytes_per_s,
                "psi_memory_some_pct": psi,
                "rss_peak_bytes": host.rss_peak_bytes,
                "mem_available_min_bytes": host.mem_available_min_bytes,
            },
            "# Lower the job's resident memory, or give it a machine with more:\n"
            "loader = DataLoader(dataset, ..., num_workers=fewer, prefetch_factor=2)  # each worker holds batches\n"
            "# keep large arrays in one memory-mapped file (np.load(path, mmap_mode='r')) instead of per-worker copies",
            explanation="Estimate: 1 / (1 - PSI memory 'some' share); not estimated where PSI is absent.",
            severity=None if psi is not None else "warning",
        )
    return _dataset_reread(inp, host)


def _dataset_reread(inp: DoctorInput, host: HostSummary) -> Finding | None:
    record, summary = inp.record, inp.summary
    lb = loading_bound(record, summary, host)
    loaders = [loader for loader in record.config.loaders if loader.dataset_bytes_on_disk]
    if lb is None or not loaders or lb.data_wait_share < DATA_WAIT_MIN_SHARE or lb.blocked_share is None:
        return None
    size = max(loader.dataset_bytes_on_disk or 0 for loader in loaders)
    avail = host.mem_available_min_bytes
    read = host.disk_read_total_bytes
    if avail is None or read is None or size > DATASET_FITS_SHARE * avail or read < DATASET_REREAD_MIN_SHARE * size:
        return None
    # Served from RAM, loading keeps its CPU work and loses its blocked part (model: load_blocked_s -> 0).
    model = step_inputs(record, summary, host)
    if model is None:
        return None
    est = estimate(model, model.changed(load_blocked_s=0.0), lb.step_s)
    if est < REPORT_MIN_SPEEDUP:
        return None
    return make_finding(
        "HOST_MEMORY_PRESSURE",
        est,
        f"The {size / 2**30:.2f} GiB dataset fits in memory but is read from disk while the step waits",
        {
            "dataset_bytes_on_disk": size,
            "mem_available_min_bytes": avail,
            "disk_read_bytes_while_measured": read,
            "data_wait_share": lb.data_wait_share,
            "loading_blocked_share": lb.blocked_share,
            "iowait_pct": host.iowait_pct,
        },
        "# Read it once into memory (or a memory-mapped packed file the page cache keeps):\n"
        "#   stave pack DATA_DIR packed/   then   stave.data.ImageLoader('packed/', ...)\n"
        "# or, for small images, stave pack --raw to store decoded pixels",
        explanation=(
            "The disk read about as many bytes as the dataset holds while the steps waited for data: "
            "the page cache is not keeping it. Estimate: the blocked part of the data wait removed."
        ),
    )
