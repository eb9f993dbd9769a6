"""Rules over the records of a multi-process run (one RunRecord per rank).

NO_DISTRIBUTED_SAMPLER, FIND_UNUSED_PARAMETERS, GRAD_ACCUM_NO_SYNC, RANK_FAILED and COMM_EXPOSED
read the records ("records" kind). The per-rank timing rules RANK_STRAGGLER and RANK_IMBALANCE
("ranks" kind) live in ranks.py, shared with ``stave trace``. Each page docs/findings/<ID>.md
states its rule's mechanism and estimate.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any, Sequence

from stave.analyze.step_model import speedup
from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.rules._helpers import REPORT_MIN_SPEEDUP, make_finding
from stave.diagnose.shared_findings import COMM_EXPOSED, step_only_inputs
from stave.dist.sampling import content_match, sample_overlaps
from stave.measure.ranks import rank_status
from stave.measure.record import RunRecord
from stave.measure.steps import step_time_s

# Shared indices beyond DistributedSampler's padding must reach this count before they count as
# overlap: a handful could come from a custom sampler's own edge cases, dozens cannot.
MIN_SHARED_INDICES = 8
# Ranks together covering the dataset 1.5 times per epoch or more read it more than once: a
# sharded sampler covers it once (plus at most world_size - 1 padded samples), an unsharded one
# world_size >= 2 times.
UNSHARDED_COVERAGE = 1.5
# A step must do at least this many backward passes to count as gradient accumulation.
ACCUM_MIN_BACKWARDS = 2
# Accumulation without no_sync is reported when most accumulating steps synchronize more than
# once: a majority, so one odd step (an epoch's tail) decides nothing.
ACCUM_STEP_SHARE = 0.5
# The last-arriving rank waits only for the transfer itself: COMM_EXPOSED's shared threshold.
COMM_MIN_SHARE = COMM_EXPOSED.threshold.value
# The exposed transfer is read at this quantile of the steps: every step pays the transfer, so a low
# quantile still holds it, while steps where a peer was descheduled fall above.
EXPOSED_QUANTILE = 0.25
# The last bucket is launched when backward has produced its gradients, so no overlap hides its
# all-reduce; the one fix that shortens it is a smaller payload, and bf16 compression halves it.
LAST_BUCKET_COMPRESSION = 0.5
# DDP's own smallest bucket (its first one, torch.distributed._DEFAULT_FIRST_BUCKET_BYTES): a bucket
# no larger is not "too large", and splitting it further only adds a collective's latency per piece.
SMALL_BUCKET_BYTES = 1 << 20


def sync_buckets(records: Sequence[RunRecord]) -> tuple[float, float] | None:
    """Median over ranks of (buckets per gradient sync, bytes per bucket); ``None`` when not counted."""
    per_rank = [(r.dist.comm_buckets / sum(r.dist.rounds_by_step), r.dist.comm_bytes / r.dist.comm_buckets)
                for r in records if r.dist.comm_buckets > 0 and sum(r.dist.rounds_by_step) > 0]
    if not per_rank:
        return None
    return statistics.median(b for b, _ in per_rank), statistics.median(n for _, n in per_rank)


def hideable_comm_s(exposed_s: float, buckets: tuple[float, float] | None) -> float:
    """The part of the exposed wait that a fix can remove (seconds per step).

    The wait runs from the last bucket's launch, so it always holds that bucket's own transfer:
    with ``B`` equal buckets a sync, ``exposed_s / B`` of it (an upper bound on its share, as part of
    the wait may be earlier buckets' unhidden transfers). When buckets are already small (at most
    :data:`SMALL_BUCKET_BYTES`), no bucket setting hides it and compression only halves it; larger
    buckets, or counts not known (a trace), keep all of the wait removable.
    """
    if buckets is None or buckets[0] < 1 or buckets[1] <= 0 or buckets[1] > SMALL_BUCKET_BYTES:
        return exposed_s
    last_s = exposed_s / buckets[0]
    return exposed_s - last_s * (1.0 - LAST_BUCKET_COMPRESSION)


def _finding(fid: str, est: float, title: str, evidence: dict[str, Any], fix: str, explanation: str,
             rank: int | None = None, severity: str | None = None) -> Finding:
    """A Finding about the ranks together, with the rank it names (if one)."""
    found = make_finding(fid, est, title, evidence, fix, explanation, severity=severity)
    return dataclasses.replace(found, rank=rank) if rank is not None else found


def _speedup(step_s: float, saved_s: float) -> float:
    """``T / (T - saved)``: the shared what-if model (stave.analyze.step_model)."""
    return speedup(step_s, step_s - max(saved_s, 0.0))


def _ok(records: Sequence[RunRecord]) -> list[RunRecord]:
    return [r for r in records if rank_status(r) == "ok" and r.counted_steps()]


def _median_step_s(records: Sequence[RunRecord]) -> float:
    # The ranks' typical step: the median over ranks of each rank's step time.
    return step_time_s(step_time_s(s.duration_ns / 1e9 for s in r.counted_steps()) for r in records)


# --- NO_DISTRIBUTED_SAMPLER ----------------------------------------------------------------------


def _dataset_sources(records: Sequence[RunRecord], loader_id: int) -> frozenset[str] | None:
    """The dataset files every rank's loader reads, when they are provably the same; else ``None``.

    Equal indices mean equal samples only over the same data: ranks that each read their own
    shard of files draw index 0 of different files, which is correct use (``None``). Without files
    (an in-memory dataset) the empty set is returned: the finding is then marked not certain.
    """
    seen: set[frozenset[str]] = set()
    for r in records:
        for info in r.config.loaders:
            if info.loader_id == loader_id:
                seen.add(frozenset(info.dataset_paths))
    if len(seen) != 1:
        return None
    return next(iter(seen))


@rule("NO_DISTRIBUTED_SAMPLER", kind="records")
def no_distributed_sampler(records: list[RunRecord]) -> Finding | None:
    """The ranks' loaders draw from the same pool of samples instead of disjoint shards."""
    for ov in sample_overlaps(records):
        sources = _dataset_sources(records, ov.loader_id)
        if sources is None:
            continue  # the ranks read different files: per-rank shards, correct use
        same_content = content_match(records, ov.loader_id)
        if same_content is False:
            continue  # different samples at the same indices: each rank holds its own shard
        proven = bool(sources) or same_content is True
        excess = ov.shared_indices - ov.padding_allowance
        overlapping = excess >= MIN_SHARED_INDICES
        covers_many = ov.coverage is not None and ov.coverage >= UNSHARDED_COVERAGE
        if not (overlapping or covers_many):
            continue
        world = max(r.run.world_size for r in records)
        identical = ov.unique_fraction <= 1.0 / len(ov.ranks) + 1e-9
        est = ov.coverage if ov.coverage is not None else 1.0 / ov.unique_fraction
        est = min(max(est, 1.0), float(world))
        how = ("identical on every rank" if identical
               else f"{ov.shared_indices} of the first {ov.indices_per_rank} indices per rank shared" if overlapping
               else f"each rank's epoch covers the dataset ({ov.coverage:.2f}x together)")
        found = _finding(
            "NO_DISTRIBUTED_SAMPLER",
            est,
            f"Every rank reads the same samples (loader {ov.loader_id}: {how}); an epoch does the work "
            f"{est:.1f}x over",
            {
                "loader_id": ov.loader_id,
                "dataset_type": ov.dataset_type,
                "sampler_type": ov.sampler_type,
                "dataset_len": ov.dataset_len,
                "ranks_compared": ov.ranks,
                "indices_per_rank": ov.indices_per_rank,
                "shared_indices": ov.shared_indices,
                "padding_allowance": ov.padding_allowance,
                "unique_fraction": ov.unique_fraction,
                "epoch_samples_by_rank": ov.epoch_samples,
                "coverage_per_epoch": ov.coverage,
                "world_size": world,
                "same_dataset_files": sorted(sources)[:5],
                # The same files, or the same sample digests at the same indices; without either
                # (an in-memory dataset not digested) the records cannot prove the samples equal.
                "same_samples_proven": proven,
                "same_sample_digests": same_content,
            },
            """
from torch.utils.data.distributed import DistributedSampler

sampler = DistributedSampler(dataset, shuffle=True)          # one disjoint shard per rank
loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)  # no shuffle= here
for epoch in range(epochs):
    sampler.set_epoch(epoch)                                  # a new shuffle every epoch
    for batch in loader:
        ...
""",
            "Shards of a sharded sampler are disjoint, so the ranks' index streams can share at most the "
            "few indices DistributedSampler pads with; these share more, or each rank's epoch is the "
            "whole dataset. Each rank then computes gradients on samples the others also see. Estimate: "
            "epoch time over the sharded epoch time (the ranks' epoch sizes over len(dataset), or the "
            "duplication seen in the index streams).",
        )
        return found if proven else dataclasses.replace(found, certain=False)
    return None


# --- FIND_UNUSED_PARAMETERS -----------------------------------------------------------------------


@rule("FIND_UNUSED_PARAMETERS", kind="records")
def find_unused_parameters(records: list[RunRecord]) -> Finding | None:
    """DDP searches the autograd graph for unused parameters after every forward."""
    ok = [r for r in _ok(records) if r.dist.find_unused_parameters and not r.dist.static_graph]
    if not ok:
        return None
    search_s = []
    for r in ok:
        counted = r.counted_steps()
        by_step = r.dist.find_unused_ns_by_step
        search_s.append(sum(by_step[s.index] for s in counted if s.index < len(by_step)) / len(counted) / 1e9)
    saved = statistics.median(search_s)
    T = _median_step_s(ok)
    est = _speedup(T, saved)
    unused = [r.dist.unused_params for r in ok if r.dist.unused_params is not None]
    none_unused = bool(unused) and max(unused) == 0
    if est < REPORT_MIN_SPEEDUP and not none_unused:
        return None
    if none_unused:
        title = (f"find_unused_parameters=True costs {saved * 1e3:.2f} ms per step and no parameter is unused")
        fix = "model = DistributedDataParallel(model, device_ids=device_ids, find_unused_parameters=False)"
    else:
        title = (f"find_unused_parameters=True searches the graph every step ({saved * 1e3:.2f} ms); "
                 f"{max(unused) if unused else 'some'} parameters go unused")
        fix = """
# the same parameters go unused every step: let DDP learn the graph once
model = DistributedDataParallel(model, device_ids=device_ids, static_graph=True)
# (or remove the unused branch, or freeze it: p.requires_grad_(False))
"""
    return _finding(
        "FIND_UNUSED_PARAMETERS",
        est,
        title,
        {
            "search_s_per_step": saved,
            "search_s_per_step_by_rank": {str(r.run.rank): s for r, s in zip(ok, search_s)},
            "step_time_s": T,
            "unused_params": max(unused) if unused else None,
            "ddp_params": ok[0].dist.ddp_params,
        },
        fix,
        "With find_unused_parameters=True, DDP walks the autograd graph from the outputs after every "
        "forward to mark parameters that will get no gradient. Estimate: T / (T - the measured search "
        "time per step).",
        severity=None if est >= REPORT_MIN_SPEEDUP else "info",
    )


# --- GRAD_ACCUM_NO_SYNC ---------------------------------------------------------------------------


@rule("GRAD_ACCUM_NO_SYNC", kind="records")
def grad_accum_no_sync(records: list[RunRecord]) -> Finding | None:
    """Gradient accumulation that all-reduces after every micro-batch instead of once per step."""
    ok = [r for r in _ok(records) if r.dist.comm_hook is not None]
    saved_by_rank: dict[int, float] = {}
    rounds_seen: list[float] = []
    backwards_seen: list[float] = []
    for r in ok:
        by_step = r.dist.rounds_by_step
        accum = [s for s in r.counted_steps() if s.backward_calls >= ACCUM_MIN_BACKWARDS]
        if not accum:
            continue
        synced = [s for s in accum if s.index < len(by_step) and by_step[s.index] >= 2]
        if len(synced) < ACCUM_STEP_SHARE * len(accum) or not synced:
            continue
        saved = 0.0
        for s in synced:
            rounds = by_step[s.index]
            saved += s.comm_wait_ns / 1e9 * (rounds - 1) / rounds
        saved_by_rank[r.run.rank] = saved / len(r.counted_steps())
        rounds_seen.append(statistics.mean(by_step[s.index] for s in synced))
        backwards_seen.append(statistics.mean(s.backward_calls for s in synced))
    if not saved_by_rank:
        return None
    # The last-arriving rank's wait is the transfer alone: the part no_sync removes for sure.
    saved = min(saved_by_rank.values())
    T = _median_step_s(ok)
    est = _speedup(T, saved)
    return _finding(
        "GRAD_ACCUM_NO_SYNC",
        est,
        f"Gradient accumulation all-reduces after every micro-batch ({statistics.median(rounds_seen):.0f} "
        f"synchronizations per optimizer step); only the last one is needed",
        {
            "syncs_per_step": statistics.median(rounds_seen),
            "backward_passes_per_step": statistics.median(backwards_seen),
            "saved_s_per_step_by_rank": {str(k): v for k, v in saved_by_rank.items()},
            "saved_s_per_step": saved,
            "step_time_s": T,
        },
        """
for i, (x, y) in enumerate(loader):
    last = (i + 1) % accum_steps == 0
    with contextlib.nullcontext() if last else model.no_sync():   # skip the all-reduce
        loss = criterion(model(x), y) / accum_steps
        loss.backward()
    if last:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
""",
        "DDP all-reduces the gradients at the end of every backward pass; inside model.no_sync() it only "
        "accumulates them locally, and the next synchronized backward reduces the sum. Estimate: "
        "T / (T - the collective wait of all but one synchronization per step), using the rank that "
        "waited least (its wait is the transfer, not another rank's lateness).",
    )


# --- RANK_FAILED ----------------------------------------------------------------------------------


@rule("RANK_FAILED", kind="records")
def rank_failed(records: list[RunRecord]) -> Finding | None:
    """A rank crashed, was killed, or left no record."""
    world = max(max(r.run.world_size, r.dist.world_size) for r in records)
    present = {r.run.rank for r in records}
    missing = [k for k in range(world) if k not in present]
    failed = [r for r in records if rank_status(r) in ("crashed", "killed", "interrupted")]
    if not failed and not missing:
        return None
    order = {"killed": 0, "crashed": 1, "interrupted": 2}
    failed.sort(key=lambda r: (order[rank_status(r)], r.run.rank))
    causes = [r for r in failed if rank_status(r) != "interrupted"]
    first = causes[0] if causes else (failed[0] if failed else None)
    detail = {}
    for r in failed:
        rss = [h.rss_bytes for h in r.host if h.rss_bytes is not None]
        detail[str(r.run.rank)] = {
            "status": rank_status(r),
            "hostname": r.run.hostname,
            "pid": r.run.pid,
            "steps_measured": len(r.steps),
            "last_step_time_s": r.steps[-1].duration_ns / 1e9 if r.steps else None,
            "peak_rss_bytes": max(rss) if rss else None,
            "error": r.run.error,
        }
    if first is not None:
        title = (f"Rank {first.run.rank} {rank_status(first)} after {len(first.steps)} steps"
                 + (f" on {first.run.hostname}" if first.run.hostname else ""))
        others = [r for r in failed if r is not first]
        if others:
            title += "; then " + ", ".join(f"rank {r.run.rank} {rank_status(r)}" for r in others)
    else:
        title = f"Rank(s) {', '.join(map(str, missing))} left no record"
    if missing and first is not None:
        title += f"; rank(s) {', '.join(map(str, missing))} left no record"
    return _finding(
        "RANK_FAILED",
        1.0,
        title,
        {"failed_ranks": detail, "missing_ranks": missing, "world_size": world},
        """
# a killed rank: look for the kernel's OOM killer on its node
dmesg -T | grep -i -E "killed process|out of memory"
# a crashed rank: its traceback is in the launcher's output (prefix [rank N]); torchrun can
# restart the group from your last checkpoint:
torchrun --max-restarts=3 --nproc-per-node=N train.py
""",
        "One failed rank stops the job: the others fail in their next collective or are stopped by the "
        "launcher. The report keeps what each rank measured before it ended; a killed rank's numbers "
        "are from its last periodic record.",
        rank=first.run.rank if first is not None else (missing[0] if missing else None),
        severity="critical",
    )


# --- COMM_EXPOSED ---------------------------------------------------------------------------------


def exposed_comm_s(records: Sequence[RunRecord]) -> list[float]:
    """Per step counted on every rank, the smallest collective wait of any rank (seconds).

    DDP keeps the ranks in lockstep, so step i is the same all-reduce on every rank; the rank that
    arrived last at it waited for no one, so its wait is the transfer backward did not hide (plus
    any moment its peers were descheduled).
    """
    per_rank = [{s.index: s.comm_wait_ns for s in r.counted_steps()} for r in records]
    common = set(per_rank[0]).intersection(*per_rank[1:]) if per_rank else set()
    return [min(waits[i] for waits in per_rank) / 1e9 for i in sorted(common)]


@rule("COMM_EXPOSED", kind="records")
def comm_exposed(records: list[RunRecord]) -> Finding | None:
    """Even the last rank to arrive waits long for the gradient all-reduce: the transfer is the cost."""
    ok = [r for r in _ok(records) if r.dist.comm_hook is not None]
    if len(ok) < 2:
        return None
    exposed = sorted(exposed_comm_s(ok))
    if not exposed:
        return None
    # A low quantile, not the mean: the transfer is a floor every step pays, while a peer that the
    # OS descheduled adds to some steps only, and compression would not remove that.
    floor_s = exposed[int(len(exposed) * EXPOSED_QUANTILE)]
    T = _median_step_s(ok)
    share = floor_s / T if T > 0 else 0.0
    # The threshold is about the wait a fix can remove: a model whose gradients fit one bucket
    # all-reduces after backward by construction, and that is not overlap failing.
    buckets = sync_buckets(ok)
    hideable_s = hideable_comm_s(floor_s, buckets)
    if T <= 0 or hideable_s / T < COMM_MIN_SHARE:
        return None
    # COMM_EXPOSED's shared estimator, as from a trace: the removable part hidden, an upper bound.
    est = COMM_EXPOSED.estimate(step_only_inputs(T), exposed_s=hideable_s, device_s=None, step_s=T)
    if est < REPORT_MIN_SPEEDUP:
        return None
    return _finding(
        "COMM_EXPOSED",
        est,
        f"The gradient all-reduce itself takes {share:.0%} of the step: even the last rank to arrive waits "
        f"{floor_s * 1e3:.1f} ms per step after its backward",
        {
            "exposed_comm_s_per_step": floor_s,
            "exposed_share": share,
            "buckets_per_sync": buckets[0] if buckets else None,
            "bytes_per_bucket": buckets[1] if buckets else None,
            "hideable_comm_s_per_step": hideable_s,
            "exposed_quantile": EXPOSED_QUANTILE,
            "steps_compared": len(exposed),
            "step_time_s": T,
            "comm_bytes_per_step": statistics.median(
                r.dist.comm_bytes / max(1, sum(r.dist.rounds_by_step)) for r in ok),
        },
        # DDP's gradient all-reduce: the data-parallel fix.
        COMM_EXPOSED.fix(data_parallel=True),
        "Per step, the rank that arrived last at the all-reduce waited for no one: its wait after "
        "backward is the transfer that backward's compute did not hide. The last bucket's own "
        "transfer (the wait over the buckets per sync) starts after backward and can only be "
        "halved by compression; the rest can be hidden. Estimate: T / (T - that removable part), "
        "an upper bound.",
    )
