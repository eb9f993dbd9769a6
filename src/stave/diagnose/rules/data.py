"""DATA_IO_BOUND and DATA_CPU_BOUND: the step waits for its input, and why.

Both start from the same fact: the steady step (mean over the counted steps that are neither
stalls nor epoch starts, see :mod:`stave.analyze.loading`) spends a real share of its time
blocked in ``next()`` on the DataLoader. They then ask the workers (or the main process, with
``num_workers=0``) what loading a sample consists of. Mostly *blocked* (off-CPU and not queueing
for a core): storage latency, DATA_IO_BOUND. Mostly on-CPU or queueing for a core: the loading
needs more CPU than it gets, DATA_CPU_BOUND, with the most expensive stage named.
"""

from __future__ import annotations

import math
import statistics

from stave.analyze.host import HostSummary, summarize_host
from stave.analyze.loading import LoadingBound, loading_bound
from stave.analyze.pipeline import StageCost
from stave.analyze.step_inputs import delivery_s_per_step, step_inputs
from stave.analyze.step_model import estimate
from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.inputs import DoctorInput
from stave.diagnose.rules._helpers import REPORT_MIN_SPEEDUP, at_free_cores, dataloader_call, make_finding, phase_lines
from stave.diagnose.rules.threads import cpu_contention
from stave.measure.config import LoaderInfo

# Hiding a wait shorter than a tenth of the step cannot reach the 1.1x warning level.
DATA_WAIT_MIN_SHARE = 0.10
# Loading is I/O-bound when more than half of it is spent blocked: the worker waits on storage
# more than it computes, so more CPU would not help but more requests in flight would.
BLOCKED_MIN_SHARE = 0.5
# A worker blocked on storage uses no CPU (the step model prices the CPU its loading does use), so
# the cores do not bound how many reads may be in flight; memory does. A forked worker needs at most
# what the process it copies holds (copy-on-write pages stay shared until written), so the job's
# resident memory per process bounds each extra worker's; this share of the memory left free is
# theirs to take, the rest stays for the page cache and the system.
IO_WORKERS_MEMORY_SHARE = 0.5
# Without memory counters, this many workers per usable core: a bound that keeps the extra workers'
# memory near what the job already holds on a typical machine (a few GB per core).
IO_WORKERS_PER_CORE = 4
# One worker beyond the break-even count absorbs batch-to-batch jitter, which otherwise surfaces
# as wait whenever one batch is slower than the compute it hides behind.
WORKER_SPARE = 1
# A map-style fetch costs Python a __getitem__ call, a tuple and a per-sample collate (about
# 5-20 µs a sample). A sample whose whole loading takes less than this is in memory already: its
# cost is that per-item overhead, which whole-batch indexing removes; worker processes would add
# their per-batch transfer (pickling through shared memory, 0.1-1 ms) to it instead.
PER_ITEM_MAX_S = 50e-6


def _needed_workers(lb: LoadingBound) -> int:
    """Workers whose combined throughput keeps up with the compute, plus a spare."""
    if lb.compute_wall_s <= 0:
        return lb.workers + 1
    return math.ceil(lb.load_wall_s / lb.compute_wall_s) + WORKER_SPARE


def _common_evidence(lb: LoadingBound) -> dict[str, object]:
    pipe = lb.pipeline
    return {
        "step_time_mean_s": lb.step_s,
        "data_wait_mean_s": lb.data_wait_s,
        "data_wait_share": lb.data_wait_share,
        "steady_steps": lb.steady_steps,
        "num_workers": lb.workers,
        "cores_usable": lb.cores,
        "cores_available": lb.cores_available,
        "load_wall_s_per_sample": pipe.wall_s_per_sample,
        "load_cpu_s_per_sample": pipe.cpu_s_per_sample,
        "load_wall_s_per_step": lb.load_wall_s,
        "compute_wall_s_per_step": lb.compute_wall_s,
        "loading_on_cpu_share": lb.cpu_share,
        # Measured (schedstat run_delay) or, marked as a bound, derived from the machine's run queue.
        "loading_waiting_for_core_share": lb.queue_share,
        "waiting_for_core_is_upper_bound": lb.queue_share_is_bound,
        "loading_blocked_share": lb.blocked_share,
    }


def _bound(inp: DoctorInput) -> LoadingBound | None:
    lb = loading_bound(inp.record, inp.summary, summarize_host(inp.record))
    if lb is None or lb.data_wait_share < DATA_WAIT_MIN_SHARE:
        return None
    return lb


def _io_workers_limit(lb: LoadingBound, host: HostSummary) -> int:
    """The most loader workers the fix may name for blocked reads: as many as half the free memory
    holds at the job's resident memory per process (an upper bound of a forked worker's own), or
    :data:`IO_WORKERS_PER_CORE` per usable core where the memory counters are absent."""
    if host.rss_peak_bytes and host.mem_available_min_bytes:
        per_process = host.rss_peak_bytes / (1 + lb.workers)
        extra = math.floor(host.mem_available_min_bytes * IO_WORKERS_MEMORY_SHARE / max(per_process, 1.0))
        return max(lb.workers, lb.workers + extra)
    return IO_WORKERS_PER_CORE * lb.cores


@rule("DATA_IO_BOUND", kind="doctor")
def data_io_bound(inp: DoctorInput) -> Finding | None:
    """The step waits for data while the loading is mostly blocked on reads."""
    # Beside busy processes the compute's waits at the pool's barrier are MACHINE_BUSY's: the reads'
    # share is judged on the step as it would go at the free cores. Reads blocked on storage do not
    # speed up with it (the planted per-read latency beside a busy loop: compute 60 ms against 20 ms
    # at the free cores, the wait's share 14 % instead of 34 %, and DATA_IO_BOUND went unnamed).
    inp = at_free_cores(inp)
    lb = _bound(inp)
    if lb is None or lb.blocked_share is None or lb.blocked_share < BLOCKED_MIN_SHARE:
        return None
    pipe = lb.pipeline
    host = summarize_host(inp.record)
    most = _io_workers_limit(lb, host)
    workers = min(max(_needed_workers(lb), lb.workers + 1), most)
    evidence = _common_evidence(lb)
    evidence.update(
        {
            "opens_per_sample": pipe.opens_per_sample,
            "read_calls_per_sample": pipe.read_calls_per_sample,
            "bytes_per_read_call": pipe.bytes_per_read_call,
            "storage_read_bytes_per_sample": pipe.read_bytes_per_sample,
            "iowait_pct": host.iowait_pct,
            "disk_read_bytes_per_s": host.disk_read_bytes_per_s,
            "workers_limit": most,
        }
    )
    pack = (
        "# Or remove the per-sample file opens: pack the dataset once into a few large\n"
        "# memory-mapped shards and read it with stave's loader:\n"
        "#   stave pack DATA_DIR packed/\n"
        f"loader = stave.data.ImageLoader('packed/', batch_size={pipe.loader.batch_size}, workers={min(workers, lb.cores_available)})"
    )
    model = step_inputs(inp.record, inp.summary, host)
    if model is None:
        return None
    if workers > lb.workers:
        # More reads in flight: the model's producer time divides the blocked time over more workers.
        after = model.changed(workers=workers, load_extra_s=0.0 if model.workers == 0 else model.load_extra_s)
        evidence["suggested_workers"] = workers
        fix = (
            f"# {workers} workers keep {workers} reads in flight; blocked workers use no CPU.\n"
            f"{dataloader_call(pipe.loader, num_workers=workers, persistent_workers=True, prefetch_factor=4)}\n"
            f"{pack}"
        )
    else:
        # Already as many workers as is sensible: only fewer, larger reads help. Packed shards are
        # read from the page cache, so the blocked part of loading goes and its CPU part stays.
        after = model.changed(load_blocked_s=0.0)
        fix = pack
    evidence["model_inputs_changed"] = {k: [getattr(model, k), getattr(after, k)]
                                        for k in ("workers", "load_blocked_s", "load_extra_s")
                                        if getattr(model, k) != getattr(after, k)}
    est = estimate(model, after, lb.step_s)
    if est < REPORT_MIN_SPEEDUP:
        return None
    opens = pipe.opens_per_sample
    detail = f", {opens:.1f} file opens per sample" if opens is not None else ""
    return make_finding(
        "DATA_IO_BOUND",
        est,
        f"The step waits {lb.data_wait_share:.0%} of its time for data; loading is "
        f"{lb.blocked_share:.0%} blocked on reads{detail}",
        evidence,
        fix,
        explanation=(
            "Each sample's loading spends most of its time off-CPU without waiting for a core: "
            "the workers are blocked on storage. More requests in flight (workers) hide the "
            "latency; fewer, larger reads (a packed dataset) remove it."
        ),
        lines=phase_lines(inp.record, "data_wait"),
    )


# What to do about the most expensive stage, by the kind of work it is.
_STAGE_ADVICE = {
    # 'load' is the Dataset's own __getitem__ outside its transforms: reading and decoding for an
    # image folder, per-sample array math for a tabular or signal dataset (no way to tell them apart
    # from its timing), so the advice names both.
    "load": "the Dataset's own __getitem__ outside its transforms: if it decodes images, "
    "stave.data.ImageLoader decodes with libjpeg-turbo, at reduced DCT scale when the crop allows; if it "
    "computes per sample (normalizing, casting, augmenting arrays), do that once on the whole batch "
    "after the DataLoader, or once before training",
    "Resize": "resizing: pack downscaled images once (stave pack --max-side 256) instead of "
    "resizing every epoch",
    "RandomResizedCrop": "crop and resize: stave.data.ImageLoader picks the crop before decoding "
    "and decodes only what the crop needs",
    "ToTensor": "float conversion: keep samples uint8 (PILToTensor) and convert the whole batch "
    "on the device with stave.data.DeviceLoader",
    "Normalize": "normalization: normalize the whole batch on the device with "
    "stave.data.DeviceLoader(loader, device, mean=..., std=...)",
    "ConvertImageDtype": "dtype conversion: convert the whole batch on the device with "
    "stave.data.DeviceLoader",
    "collate": "collation: return whole batches from a batched __getitems__, or use "
    "stave.data.ImageLoader, which collates into preallocated buffers",
}


def _stage_advice(stage: StageCost) -> str:
    base = stage.name.split("#", 1)[0].split(".")[-1]
    return _STAGE_ADVICE.get(
        base,
        f"{base}: make it cheaper, or apply it to the whole batch on the device (ImageLoader's batch_transform)",
    )


def _per_item_bound(lb: LoadingBound) -> bool:
    """Loading is per-item Python overhead on samples already in memory (no files opened per sample)."""
    pipe = lb.pipeline
    return (
        pipe.wall_s_per_sample < PER_ITEM_MAX_S
        and (pipe.loader.batch_size or 0) > 1
        and not pipe.loader.iterable_dataset
        and (pipe.opens_per_sample is None or pipe.opens_per_sample < 0.01)
    )


def _batched_fetch_fix(loader: LoaderInfo) -> str:
    sampler = "RandomSampler(dataset)" if loader.sampler_type == "RandomSampler" else "SequentialSampler(dataset)"
    return (
        "# The samples are in memory: fetch each batch with one index instead of one __getitem__ per sample.\n"
        "# TensorDataset takes a list of indices as is; your own dataset's __getitem__ must accept one too.\n"
        f"from torch.utils.data import BatchSampler, {sampler.split('(')[0]}\n"
        f"sampler = BatchSampler({sampler}, batch_size={loader.batch_size}, drop_last={loader.drop_last})\n"
        "loader = DataLoader(dataset, batch_size=None, sampler=sampler)  # batch_size=None: no per-sample collate\n"
    )


@rule("DATA_CPU_BOUND", kind="doctor")
def data_cpu_bound(inp: DoctorInput) -> Finding | None:
    """The step waits for data while the loading is CPU work (or queues for a busy machine's cores)."""
    lb = _bound(inp)
    if lb is None or (lb.blocked_share is not None and lb.blocked_share >= BLOCKED_MIN_SHARE):
        return None
    pipe = lb.pipeline
    host = summarize_host(inp.record)
    top = pipe.top_stage()
    evidence = _common_evidence(lb)
    evidence.update(
        {
            "machine_cpu_pct": host.cpu_system_pct,
            "workers_cpu_pct": host.cpu_workers_pct,
            "stages_us_per_sample": {s.name: s.wall_s_per_sample * 1e6 for s in pipe.stages},
            "top_stage": top.name if top else None,
            "top_stage_share": top.share if top else None,
        }
    )
    stage_line = ""
    if top is not None:
        stage_line = f"# The most expensive stage is {top.name} ({top.share:.0%} of loading): {_stage_advice(top)}.\n"
    workers = min(max(_needed_workers(lb), lb.workers + 1), lb.cores)
    model = step_inputs(inp.record, inp.summary)
    if model is None:
        return None
    priced: dict[int, float] | None = None
    stage_bound = False
    workers_note = ""
    bounds: dict[int, list[float]] = {}
    extra = 0.0 if model.workers == 0 else model.load_extra_s
    counts = {w: model.changed(workers=w, load_extra_s=extra) for w in range(lb.workers + 1, workers + 1)}
    if not _per_item_bound(lb) and workers > lb.workers:
        # From the main process, a worker's one thread also does what the trainer's pool did for the
        # loading's torch ops: `load_thread_factor`, an upper bound (it counts the pool's spin between
        # those ops as work). Each count is priced at that bound and at 1 (the loading's own clock).
        bounds = {w: [estimate(model, after, lb.step_s)] for w, after in counts.items()}
        if model.load_thread_factor > 1.0:
            for w, after in counts.items():
                bounds[w].append(estimate(model, after.changed(load_thread_factor=1.0), lb.step_s))
            evidence["load_thread_factor"] = model.load_thread_factor
        evidence["workers_priced"] = {str(w): b for w, b in bounds.items()}
    # A count is named only where its pessimistic bound still gains: where the bounds straddle no
    # gain the workers may as well slow the job, and a wrong verdict costs more than a missing one
    # (cpu_transforms on a 2-core EPYC: 1.00x at the bound, 1.39x at the clock, named at their mean,
    # 1.18x; two workers measured 0.85-0.89x in five sessions, one run of 1.2x on another CPU).
    # Then only cheaper loading is priced, and only where the workers were worth naming at their mean
    # (the bounds straddle no gain): this replaces a risky fix, it adds no finding where none was
    # (a stage costing nothing is a bound the job may not reach: the JPEG decode of
    # main_process_jpeg_mobilenet, whose workers are priced at 1.00x both ways).
    # Beside other processes the bounds are taken once their cores are free (as the estimate is below).
    free = {w: [estimate(model.changed(other_cores=0.0), after.changed(other_cores=0.0, load_thread_factor=f),
                         lb.step_s) for f in {model.load_thread_factor, 1.0}]
            for w, after in counts.items()} if bounds and model.other_cores > 0 else {}
    paying = [w for w, b in bounds.items() if max(min(b), min(free.get(w, b))) >= REPORT_MIN_SPEEDUP]
    straddle = not paying and any(statistics.geometric_mean(b) >= REPORT_MIN_SPEEDUP
                                  for b in [*bounds.values(), *free.values()])
    if _per_item_bound(lb):
        # Whole batches by one index: the per-item fetch and collate go. A worker still ships each
        # batch through a fresh shared-memory block (the delivery probe's worker time beyond the
        # main process's), so that stays; the gather of a batch of rows is left out (an upper bound).
        delivery = delivery_s_per_step(inp.record, inp.summary) if model.workers > 0 else None
        left = min(model.load_cpu_s, delivery) if delivery is not None else 0.0
        after = model.changed(load_cpu_s=left, load_blocked_s=0.0, load_extra_s=0.0)
        evidence["per_item_max_s"] = PER_ITEM_MAX_S
        if delivery is not None:
            evidence["worker_delivery_s_per_step"] = delivery
        fix = _batched_fetch_fix(pipe.loader)
        how = ("with whole-batch indexing, the workers left with shipping each batch (an upper bound)"
               if delivery is not None
               else "with whole-batch indexing, if the loading then cost nothing (an upper bound)")
    elif paying:
        # Workers run alongside the compute threads: the model prices the cores they then share
        # (no gain where the compute already keeps every core busy). Each count up to the one that
        # keeps up is priced and the fastest named: on two cores beside two compute threads, one
        # worker can win where two only take the compute's cores (the model's fair share decides).
        # A count priced at two bounds (above) is named at their geometric mean, the minimax choice
        # between bounds (the same rule as CPU_CONTENTION's batch-level split).
        priced = {w: statistics.geometric_mean(bounds[w]) for w in paying}
        workers = max(priced, key=lambda w: (priced[w], -w))
        after = counts[workers]
        evidence["suggested_workers"] = workers
        fix = (
            f"# Load in {workers} worker processes (this machine has {lb.cores} usable cores), alongside the compute.\n"
            f"{dataloader_call(pipe.loader, num_workers=workers, persistent_workers=True)}\n{stage_line}"
        )
        how = f"with {workers} workers"
        if model.load_thread_factor > 1.0:
            how += (f" (the geometric mean of the worker's thread doing the pool's share of the loading's "
                    f"torch ops, {model.load_thread_factor:.2f}x its clock, and not)")
    elif top is not None and (not bounds or straddle):
        # No core left for another worker: only cheaper loading helps. Where the loading's threads
        # already take cores from the compute, that is CPU_CONTENTION's cause and fix (cheaper or
        # batch-level loading, fewer workers, fewer threads), priced there: one cause, one finding.
        if cpu_contention(inp) is not None:
            return None
        # The top stage costing nothing is the upper bound of making it cheaper, no change the lower:
        # named at their geometric mean (the minimax choice between bounds, as above), never further
        # from a gain between them than the square root of the bound.
        after = model.changed(load_cpu_s=model.load_cpu_s * (1.0 - top.share))
        stage_bound = True
        fix = stage_line
        how = f"the geometric mean of no change and {top.name} costing nothing"
        if bounds:
            low = min(min(b) for b in bounds.values())
            fix = (f"# More loader workers are not advised: beside the compute's threads on {lb.cores} usable cores\n"
                   f"# the model prices them at {low:.2f}x at worst (no gain).\n{stage_line}")
            workers_note = f"; more workers priced at {low:.2f}x at worst, not advised"
    else:
        return None
    evidence["model_inputs_changed"] = {k: [getattr(model, k), getattr(after, k)]
                                        for k in ("workers", "load_cpu_s", "load_blocked_s", "load_extra_s")
                                        if getattr(model, k) != getattr(after, k)}
    evidence["compute_threads"] = model.compute_threads
    est = priced[workers] if priced is not None else estimate(model, after, lb.step_s)
    bound = f"with the compute's {model.compute_threads:.1f} busy threads on {lb.cores} usable cores"
    if est < REPORT_MIN_SPEEDUP and model.other_cores > 0:
        # Other processes held cores while this ran, so the fix cannot pay off now; the wait is still
        # the job's once they are gone (MACHINE_BUSY says so first).
        evidence["est_speedup_with_other_load"] = est
        est = estimate(model.changed(other_cores=0.0), after.changed(other_cores=0.0), lb.step_s)
        bound += f", once the other processes' {model.other_cores:.1f} cores are free"
    if stage_bound:
        evidence["top_stage_free_speedup"] = est
        how += f" ({est:.2f}x, an upper bound){workers_note}"
        est = math.sqrt(max(est, 1.0))
    if est < REPORT_MIN_SPEEDUP:
        return None
    where = "the main process" if pipe.in_main_process else f"{lb.workers} workers"
    stage_text = f"; {top.name} is {top.share:.0%} of it" if top is not None else ""
    return make_finding(
        "DATA_CPU_BOUND",
        est,
        f"The step waits {lb.data_wait_share:.0%} of its time for data loaded on the CPU by {where}{stage_text}",
        evidence,
        fix,
        explanation=(
            f"Loading a step's samples takes {lb.load_wall_s * 1e3:.0f} ms of work against "
            f"{lb.compute_wall_s * 1e3:.0f} ms of compute to hide behind, and the loading is CPU work "
            f"({lb.cpu_share:.0%} on-CPU). Estimate {how}, {bound}."
        ),
        lines=phase_lines(inp.record, "data_wait"),
    )
