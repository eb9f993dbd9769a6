"""Several ranks: the RankTiming reduction, the straggler and imbalance rules, clock independence."""

from __future__ import annotations

from pathlib import Path

import pytest

from stave.diagnose.rules.ranks import rank_imbalance, rank_straggler
from stave.measure.ranks import RankTiming
from stave.diagnose.trace_report import analyze_paths
from trace_synth import launched, op, step, write_trace

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def rank_events(rank: int, compute_us: float, offset_us: float, steps: int = 4) -> list[dict]:
    """Each step: compute kernel of ``compute_us``, then an all-reduce that ends when the slowest
    rank (compute 900 us) has arrived; all ranks share the same true timeline, then each rank's
    clock is shifted by ``offset_us``."""
    events = []
    corr = 1
    for i in range(steps):
        t0 = i * 2000.0
        events.append(step(i + 1, t0 + offset_us, 2000))
        events.append(op("aten::mm", t0 + offset_us, 10))
        events += launched("ampere_bf16_s16816gemm_bf16_128x128", t0 + offset_us, 5,
                           t0 + 10 + offset_us, compute_us, corr)
        arrive = t0 + 10 + compute_us
        done = t0 + 10 + 900 + 100  # the slowest rank arrives at 910, the reduction takes 100
        events += launched(NCCL, arrive - 5 + offset_us, 3, arrive + offset_us, done - arrive, corr + 1)
        corr += 2
    return events


@pytest.fixture
def three_ranks(tmp_path: Path) -> Path:
    d = tmp_path / "ranks"
    d.mkdir()
    # Rank 1 computes longest; the ranks' clocks disagree by up to an hour.
    for rank, compute, offset in ((0, 500, 0.0), (1, 900, 3.6e9), (2, 520, -1.2e9)):
        write_trace(d / f"worker{rank}.pt.trace.json", rank_events(rank, compute, offset),
                    metadata={"distributedInfo": {"rank": rank, "world_size": 3}})
    return d


def test_straggler_found_without_comparing_clocks(three_ranks: Path) -> None:
    report = analyze_paths([three_ranks])
    assert [t.rank for t in report.rank_timings] == [0, 1, 2]
    waits = {t.rank: t.collective_wait_s for t in report.rank_timings}
    assert waits[1] == pytest.approx(100e-6) and waits[0] == pytest.approx(500e-6)
    (straggler,) = [f for f in report.findings if f.id == "RANK_STRAGGLER"]
    assert straggler.rank == 1 and straggler.evidence["cause"] == "compute"
    # The others wait (median of 500 and 480 us) - 100 us for it.
    assert straggler.evidence["wait_caused_per_step_s"] == pytest.approx(390e-6, rel=1e-3)
    imbalance = [f for f in report.findings if f.id == "RANK_IMBALANCE"]
    assert imbalance and imbalance[0].rank == 1


def test_rank_from_file_name_then_order(tmp_path: Path) -> None:
    a = write_trace(tmp_path / "job_rank-7.json", rank_events(0, 500, 0))
    b = write_trace(tmp_path / "plain.json", rank_events(0, 500, 0))
    report = analyze_paths([a, b])
    assert [(t.rank, t.rank_source) for t in report.traces] == [(7, "file name"), (1, "order given")]


def test_duplicate_ranks_skip_rank_rules(tmp_path: Path) -> None:
    a = write_trace(tmp_path / "a.json", rank_events(0, 500, 0), metadata={"distributedInfo": {"rank": 0}})
    b = write_trace(tmp_path / "b.json", rank_events(0, 900, 0), metadata={"distributedInfo": {"rank": 0}})
    report = analyze_paths([a, b])
    assert report.rank_timings == [] and any("same rank" in n for n in report.notes)


def timing(rank: int, wait: float, compute: float = 0.5, data: float = 0.0, host: float = 0.1,
           mem: int | None = None) -> RankTiming:
    return RankTiming(rank=rank, step_time_s=1.0, collective_wait_s=wait, data_wait_s=data,
                      compute_s=compute, host_s=host, memory_peak_bytes=mem)


def test_straggler_rule_cause_data() -> None:
    ranks = [timing(0, 0.3), timing(1, 0.31), timing(2, 0.02, data=0.3), timing(3, 0.29)]
    f = rank_straggler(ranks)
    assert f.rank == 2 and f.evidence["cause"] == "data_wait" and f.est_speedup == pytest.approx(1 / 0.72, rel=1e-3)


def test_straggler_rule_quiet_when_balanced_or_no_collectives() -> None:
    assert rank_straggler([timing(0, 0.10), timing(1, 0.11), timing(2, 0.105)]) is None
    assert rank_straggler([timing(0, 0.0), timing(1, 0.0)]) is None
    assert rank_straggler([timing(0, 0.3)]) is None


def test_straggler_computing_within_the_noise_is_not_named() -> None:
    # Rank 1 arrives last and waits 0.06 of a 1.0 s step less, its compute 0.53 against 0.50: 6 %
    # more, within the 10 % a steady job's ranks differ by (RANK_IMBALANCE's bar): no straggler.
    assert rank_straggler([timing(0, 0.10, compute=0.50), timing(1, 0.04, compute=0.53)]) is None
    # The same gap from 20 % more compute is one.
    f = rank_straggler([timing(0, 0.10, compute=0.50), timing(1, 0.04, compute=0.60)])
    assert f is not None and f.rank == 1 and f.evidence["cause"] == "compute"


def test_imbalance_rule_memory_only_is_info() -> None:
    f = rank_imbalance([timing(0, 0.1, mem=10 << 30), timing(1, 0.1, mem=14 << 30)])
    assert f is not None and f.severity == "info" and f.est_speedup == 1.0
    assert rank_imbalance([timing(0, 0.1, mem=10 << 30), timing(1, 0.1, mem=10 << 30)]) is None
