"""Rank rules over per-rank records (from traces or the distributed doctor): RANK_STRAGGLER, RANK_IMBALANCE.

Clock independence: ranks on different nodes have clocks that disagree by more than a collective
lasts, so no rule compares timestamps across ranks. A collective ends for everyone when the last
rank arrives; every other rank spends the difference waiting inside it. The straggler is therefore
the rank with the *least* time inside collectives, and the others' extra time inside them is what
it costs. Each rank's own breakdown (data wait, compute, host) then says what it did instead.
"""

from __future__ import annotations

import statistics

from stave.analyze.stats import binomial_tail
from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding, severity_for_speedup
from stave.diagnose.rules.trace_common import REPORT_MIN_SPEEDUP, speedup, tidy
from stave.measure.ranks import RankTiming

# The others' extra wait must be at least this share of the step: below it, arrival order is
# step-to-step noise and no single rank holds the job back.
STRAGGLER_MIN_SHARE = 0.05
# Arrival order must be a pattern, not chance: with per-step waits, the straggler must have waited
# least in so many of the steps all ranks share that ranks arriving in random order (each last with
# probability 1/R) would do so less than 5 % of the time (a one-sided sign test).
STRAGGLER_SIGN_P = 0.05
# Fewer shared steps than this cannot pass the sign test at 2 ranks (4 of 4: p = 1/16 > 0.05); the
# mean gap alone is then the evidence, as from a trace.
STRAGGLER_SIGN_MIN_STEPS = 5
# Compute time more than 10% above the ranks' mean is beyond step-to-step noise of a steady job.
COMPUTE_IMBALANCE_RATIO = 1.10
# A peak-memory spread above 25% means one rank runs out of memory long before the others would.
MEMORY_IMBALANCE_RATIO = 1.25

_CAUSES = {
    "data_wait_s": (
        "waiting for data",
        """\
# The straggler's loader is slower: give it more workers and check its storage
loader = DataLoader(dataset, sampler=DistributedSampler(dataset), num_workers=8,
                    pin_memory=True, persistent_workers=True)""",
    ),
    "compute_s": (
        "computing longer",
        """\
# The straggler has more work per step: balance what each rank gets
sampler = DistributedSampler(dataset, shuffle=True, drop_last=True)
# with variable-length inputs, bucket by length so every rank's batch costs the same""",
    ),
    "host_s": (
        "busy on the host (CPU contention, Python, launches)",
        """\
# The straggler's CPU is slower or shared: pin threads and check that node for other jobs
torch.set_num_threads(cores_per_rank)     # avoid oversubscription across ranks on one node""",
    ),
}


def _ok(ranks: list[RankTiming]) -> list[RankTiming]:
    return [r for r in ranks if r.status == "ok" and r.step_time_s > 0]


def _finding(fid: str, est: float, title: str, evidence: dict, fix: str, explanation: str,
             rank: int | None, source: str, severity: str | None = None) -> Finding:
    est = round(max(1.0, est), 3)
    return Finding(
        id=fid,
        severity=severity or severity_for_speedup(est),
        est_speedup=est,
        title=title,
        evidence=tidy(evidence),
        fix=fix,
        explanation=explanation,
        rank=rank,
        source=source,
    )


def _last_in_steps(straggler: RankTiming, ranks: list[RankTiming]) -> tuple[int, int] | None:
    """(steps in which ``straggler`` waited least of all ranks, steps all ranks share); ``None``
    without per-step waits on every rank."""
    if any(not r.collective_wait_by_step for r in ranks):
        return None
    shared = set.intersection(*(set(r.collective_wait_by_step) for r in ranks))
    if len(shared) < STRAGGLER_SIGN_MIN_STEPS:
        return None
    last = 0
    for i in shared:
        mine = straggler.collective_wait_by_step[i]
        if all(mine < r.collective_wait_by_step[i] for r in ranks if r is not straggler):
            last += 1
    return last, len(shared)


@rule("RANK_STRAGGLER", kind="ranks")
def rank_straggler(ranks: list[RankTiming]) -> Finding | None:
    """One rank arrives last at the collectives and the others wait for it."""
    ranks = _ok(ranks)
    if len(ranks) < 2 or all(r.collective_wait_s <= 0 for r in ranks):
        return None
    straggler = min(ranks, key=lambda r: (r.collective_wait_s, r.rank))
    others = [r for r in ranks if r is not straggler]
    others_wait = statistics.median(r.collective_wait_s for r in others)
    gap = others_wait - straggler.collective_wait_s
    T = statistics.median(r.step_time_s for r in ranks)
    if T <= 0 or gap / T < STRAGGLER_MIN_SHARE:
        return None
    est = speedup(T, gap)
    if est < REPORT_MIN_SPEEDUP:
        return None
    order = _last_in_steps(straggler, ranks)
    sign_p = binomial_tail(order[1], order[0], 1.0 / len(ranks)) if order is not None else None
    if sign_p is not None and sign_p >= STRAGGLER_SIGN_P:
        return None  # the mean gap comes from a few steps; step by step the ranks take turns
    excess = {
        key: getattr(straggler, key) - statistics.median(getattr(r, key) for r in others) for key in _CAUSES
    }
    cause = max(excess, key=lambda k: excess[k])
    if cause == "compute_s":
        others_compute = statistics.median(r.compute_s for r in others)
        if others_compute > 0 and straggler.compute_s < COMPUTE_IMBALANCE_RATIO * others_compute:
            # Said to compute longer, it must do so beyond the step-to-step noise RANK_IMBALANCE
            # allows a steady job; below it the arrival order comes from where the scheduler put each
            # rank's threads, not from its work (two symmetric CPU ranks on two cores: one last in 170
            # of 295 steps, 0.3 ms more compute of 6 ms, in two runs on two machines).
            return None
    doing, fix = _CAUSES[cause]
    return _finding(
        "RANK_STRAGGLER",
        est,
        f"Rank {straggler.rank} is the straggler: the others wait {gap * 1e3:.1f} ms per step for it "
        f"while it is {doing}",
        {
            "straggler_rank": straggler.rank,
            "straggler_collective_wait_s": straggler.collective_wait_s,
            "others_median_collective_wait_s": others_wait,
            "wait_caused_per_step_s": gap,
            "step_time_s": T,
            "straggler_excess_s": excess,
            "cause": cause.removesuffix("_s"),
            "ranks": len(ranks),
            "steps_arrived_last": order[0] if order is not None else None,
            "steps_compared": order[1] if order is not None else None,
            "arrival_order_p": sign_p,
        },
        fix,
        "The last rank to arrive at a collective waits least inside it; every other rank waits for "
        "it. Its own step breakdown shows where its extra time went. The estimate removes the "
        "others' extra wait.",
        rank=straggler.rank,
        source=straggler.source,
    )


@rule("RANK_IMBALANCE", kind="ranks")
def rank_imbalance(ranks: list[RankTiming]) -> Finding | None:
    """Ranks do unequal amounts of compute, or hold unequal amounts of memory."""
    ranks = _ok(ranks)
    if len(ranks) < 2:
        return None
    T = statistics.median(r.step_time_s for r in ranks)
    compute = [r.compute_s for r in ranks]
    mean_compute = sum(compute) / len(compute)
    heaviest = max(ranks, key=lambda r: (r.compute_s, -r.rank))
    compute_ratio = heaviest.compute_s / mean_compute if mean_compute > 0 else 1.0
    mems = [r.memory_peak_bytes for r in ranks if r.memory_peak_bytes]
    mem_ratio = max(mems) / min(mems) if len(mems) >= 2 and min(mems) > 0 else 1.0
    est = speedup(T, heaviest.compute_s - mean_compute) if compute_ratio >= COMPUTE_IMBALANCE_RATIO else 1.0
    compute_hit = compute_ratio >= COMPUTE_IMBALANCE_RATIO and est >= REPORT_MIN_SPEEDUP
    memory_hit = mem_ratio >= MEMORY_IMBALANCE_RATIO
    if not (compute_hit or memory_hit):
        return None
    parts = []
    if compute_hit:
        parts.append(f"rank {heaviest.rank} computes {compute_ratio - 1:.0%} more than the mean")
    if memory_hit:
        parts.append(f"peak memory differs {mem_ratio:.2f}x across ranks")
    return _finding(
        "RANK_IMBALANCE",
        est if compute_hit else 1.0,
        "Ranks are imbalanced: " + "; ".join(parts),
        {
            "compute_s_by_rank": {str(r.rank): r.compute_s for r in ranks},
            "compute_max_over_mean": compute_ratio,
            "memory_peak_bytes_by_rank": {str(r.rank): r.memory_peak_bytes for r in ranks},
            "memory_max_over_min": mem_ratio if len(mems) >= 2 else None,
            "step_time_s": T,
        },
        """\
# Give every rank the same work: equal shards and equal-cost batches
sampler = DistributedSampler(dataset, drop_last=True)
# sequence data: bucket by length; pipeline/expert parallel: rebalance the stage or expert split""",
        "Collectives make every rank wait for the heaviest one, so the step runs at its pace. The "
        "estimate brings the heaviest rank's compute down to the mean. A memory spread is a risk: "
        "the fullest rank limits the batch size of all.",
        rank=heaviest.rank if compute_hit else None,
        source=ranks[0].source,
        severity=None if compute_hit else "info",
    )
