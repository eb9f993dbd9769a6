"""The per-rank reduction (rank_timings) and the distributed rules, on synthetic records."""

from __future__ import annotations

import dataclasses
import random

import pytest
from dist_factory import StepShape, loader, record

from stave.doctor.diagnosis import diagnose_records
from stave.diagnose.engine import registered_rules
from stave.diagnose.rules import dist as rules
from stave.dist.timing import rank_timing, rank_timings
from stave.measure.dist import DistInfo


def ids(findings) -> list[str]:
    return [f.id for f in findings]


# --- rank_timings ----------------------------------------------------------------------------------


def test_rank_timing_takes_the_collective_wait_out_of_compute() -> None:
    rec = record(1, shapes=[StepShape(100, data=10, fwd=20, bwd=60, opt=5, comm=40)] * 6)
    t = rank_timing(rec)
    assert t.rank == 1 and t.steps == 6 and t.status == "ok"
    assert t.step_time_s == pytest.approx(0.100)
    assert t.collective_wait_s == pytest.approx(0.040)
    assert t.data_wait_s == pytest.approx(0.010)
    assert t.compute_s == pytest.approx(0.045)  # 20 + 60 + 5 - 40 ms
    assert t.host_s == pytest.approx(0.005)     # the unattributed rest
    assert t.memory_peak_bytes == 1 << 30


def test_rank_timing_of_a_rank_without_counted_steps_and_without_memory() -> None:
    rec = record(0, shapes=[], stopped_by="killed", rss=None)
    t = rank_timing(rec)
    assert (t.steps, t.step_time_s, t.status, t.memory_peak_bytes) == (0, 0.0, "killed", None)
    assert [x.rank for x in rank_timings([record(2), record(0), record(1)])] == [0, 1, 2]


def test_straggler_waiting_for_data_is_named_with_its_cause() -> None:
    fast = [StepShape(100, data=2, fwd=20, bwd=70, opt=5, comm=50)] * 8
    slow = [StepShape(100, data=52, fwd=20, bwd=22, opt=5, comm=2)] * 8
    result = diagnose_records([record(0, shapes=fast), record(1, shapes=slow)])
    straggler = [f for f in result.findings if f.id == "RANK_STRAGGLER"]
    assert straggler, ids(result.findings)
    assert straggler[0].rank == 1 and straggler[0].evidence["cause"] == "data_wait"
    assert straggler[0].est_speedup > 1.5
    assert [r.rank for r in result.ranks] == [0, 1]


def test_balanced_ranks_get_no_rank_findings() -> None:
    same = [StepShape(100, data=2, fwd=20, bwd=70, opt=5, comm=3)] * 8
    result = diagnose_records([record(0, shapes=same), record(1, shapes=same)])
    assert not {"RANK_STRAGGLER", "RANK_IMBALANCE", "COMM_EXPOSED", "RANK_FAILED"} & set(ids(result.findings))


def test_the_distributed_rules_are_registered() -> None:
    names = {r.id for r in registered_rules("records")}
    assert {"NO_DISTRIBUTED_SAMPLER", "FIND_UNUSED_PARAMETERS", "GRAD_ACCUM_NO_SYNC", "RANK_FAILED",
            "COMM_EXPOSED"} <= names


# --- NO_DISTRIBUTED_SAMPLER -----------------------------------------------------------------------


def test_identical_index_streams_are_no_distributed_sampler() -> None:
    perm = random.Random(0).sample(range(4096), 512)
    recs = [record(r, loaders=[loader(perm, epoch=4096, sampler="RandomSampler")]) for r in (0, 1)]
    f = rules.no_distributed_sampler(recs)
    assert f is not None and f.est_speedup == pytest.approx(2.0)
    assert f.evidence["shared_indices"] == 512 and f.evidence["coverage_per_epoch"] == pytest.approx(2.0)


def test_disjoint_shards_from_any_sampler_class_raise_nothing() -> None:
    # DistributedSampler: disjoint shards, and on a tiny dataset its padding repeats one index.
    n = 9
    padded = list(range(n)) + [0]
    shards = [padded[r::2] for r in (0, 1)]
    recs = [record(r, loaders=[loader(shards[r], dataset_len=n, epoch=5)]) for r in (0, 1)]
    assert rules.no_distributed_sampler(recs) is None
    # A hand-written shard-aware sampler with no len(): only its stream tells, and it is disjoint.
    custom = [record(r, loaders=[loader(list(range(r, 1024, 2)), epoch=None, sampler="StridedShards")])
              for r in (0, 1)]
    assert rules.no_distributed_sampler(custom) is None


def test_independent_unseeded_shuffles_are_caught_by_overlap_or_epoch_size() -> None:
    # Each rank shuffles the whole dataset with its own seed: few shared indices among the first
    # 512 of a large dataset, but each rank's epoch is the whole dataset.
    n = 1_000_000
    streams = [random.Random(seed).sample(range(n), 512) for seed in (1, 2)]
    recs = [record(r, loaders=[loader(streams[r], dataset_len=n, epoch=n, sampler="RandomSampler")]) for r in (0, 1)]
    f = rules.no_distributed_sampler(recs)
    assert f is not None and f.est_speedup == pytest.approx(2.0)
    # On a small dataset the overlap alone shows it, even when the sampler has no len().
    n = 2000
    streams = [random.Random(seed).sample(range(n), 512) for seed in (1, 2)]
    recs = [record(r, loaders=[loader(streams[r], dataset_len=n, epoch=None)]) for r in (0, 1)]
    f = rules.no_distributed_sampler(recs)
    assert f is not None and f.evidence["shared_indices"] > rules.MIN_SHARED_INDICES


# --- FIND_UNUSED_PARAMETERS -----------------------------------------------------------------------


def _find_unused_records(search_ms: float, unused: int | None) -> list:
    recs = []
    for r in (0, 1):
        info = DistInfo(comm_hook="allreduce (default)", find_unused_parameters=True, rounds_by_step=[1] * 8,
                        find_unused_ns_by_step=[int(search_ms * 1e6)] * 8, ddp_params=1000, unused_params=unused)
        recs.append(record(r, dist=info))
    return recs


def test_find_unused_parameters_cost_is_estimated_from_the_search_time() -> None:
    f = rules.find_unused_parameters(_find_unused_records(search_ms=20, unused=4))
    assert f is not None and "static_graph=True" in f.fix
    assert f.est_speedup == pytest.approx(100 / 80, rel=1e-3)
    assert f.evidence["unused_params"] == 4


def test_find_unused_parameters_with_nothing_unused_is_a_useless_flag() -> None:
    f = rules.find_unused_parameters(_find_unused_records(search_ms=0.3, unused=0))
    assert f is not None and f.severity == "info" and "find_unused_parameters=False" in f.fix
    assert rules.find_unused_parameters(_find_unused_records(search_ms=0.3, unused=2)) is None


# --- GRAD_ACCUM_NO_SYNC ---------------------------------------------------------------------------


def _accum_records(rounds: int) -> list:
    recs = []
    for r, comm in ((0, 30.0), (1, 10.0)):
        shapes = [StepShape(200, data=5, fwd=40, bwd=120, opt=10, comm=comm, backward_calls=4)] * 8
        info = DistInfo(comm_hook="allreduce (default)", rounds_by_step=[rounds] * 8)
        recs.append(record(r, shapes=shapes, dist=info))
    return recs


def test_accumulation_that_syncs_every_micro_batch_is_reported() -> None:
    f = rules.grad_accum_no_sync(_accum_records(rounds=4))
    assert f is not None and "no_sync" in f.fix
    # The rank that waited least (10 ms over 4 syncs) saves 3 of its 4 syncs: 7.5 ms of 200.
    assert f.evidence["saved_s_per_step"] == pytest.approx(0.0075)
    assert f.est_speedup == pytest.approx(200 / 192.5, rel=1e-3)


def test_accumulation_under_no_sync_is_fine() -> None:
    assert rules.grad_accum_no_sync(_accum_records(rounds=1)) is None


# --- RANK_FAILED ----------------------------------------------------------------------------------


def test_a_killed_rank_is_named_first_and_followers_after() -> None:
    killed = record(1, shapes=[StepShape(100, fwd=40, bwd=50)] * 3, stopped_by="killed", error="gone")
    crashed = record(0, stopped_by="error", error="RuntimeError: Connection reset by peer")
    f = rules.rank_failed([crashed, killed])
    assert f is not None and f.rank == 1 and f.severity == "critical"
    assert f.title.startswith("Rank 1 killed after 3 steps") and "rank 0 crashed" in f.title
    assert f.evidence["failed_ranks"]["1"]["steps_measured"] == 3
    assert rules.rank_failed([record(0), record(1)]) is None


# --- COMM_EXPOSED ---------------------------------------------------------------------------------


def test_exposed_transfer_is_the_floor_of_the_last_arrivals_wait() -> None:
    shapes0 = [StepShape(100, fwd=20, bwd=70, opt=5, comm=40)] * 8
    shapes1 = [StepShape(100, fwd=20, bwd=70, opt=5, comm=30)] * 8
    f = rules.comm_exposed([record(0, shapes=shapes0), record(1, shapes=shapes1)])
    assert f is not None and f.evidence["exposed_comm_s_per_step"] == pytest.approx(0.030)
    assert f.est_speedup == pytest.approx(100 / 70, rel=1e-3)


def _bucketed(buckets_per_sync: int, bytes_per_bucket: int, steps: int = 8) -> DistInfo:
    return DistInfo(comm_hook="allreduce (default)", rounds_by_step=[1] * steps,
                    comm_buckets=buckets_per_sync * steps, comm_bytes=bytes_per_bucket * buckets_per_sync * steps)


def test_one_small_bucket_is_exposed_by_construction_and_only_compression_shortens_it() -> None:
    # A small model's gradients fit one bucket (under DDP's 1 MiB first bucket): the all-reduce
    # starts after backward whatever the settings; only halving the payload removes anything.
    shapes = [StepShape(100, fwd=20, bwd=70, opt=5, comm=30)] * 8
    f = rules.comm_exposed([record(r, shapes=shapes, dist=_bucketed(1, 500_000)) for r in (0, 1)])
    assert f is not None and f.evidence["hideable_comm_s_per_step"] == pytest.approx(0.015)
    assert f.est_speedup == pytest.approx(100 / 85, rel=1e-3)
    # 12 % of the step in one small bucket: 6 % removable, under the threshold.
    shapes = [StepShape(100, fwd=20, bwd=70, opt=5, comm=12)] * 8
    assert rules.comm_exposed([record(r, shapes=shapes, dist=_bucketed(1, 500_000)) for r in (0, 1)]) is None


def test_large_or_many_buckets_keep_the_wait_removable() -> None:
    shapes = [StepShape(100, fwd=20, bwd=70, opt=5, comm=30)] * 8
    # One 40 MB bucket: too large (a smaller bucket_cap_mb lets backward hide most of it).
    big = rules.comm_exposed([record(r, shapes=shapes, dist=_bucketed(1, 40 << 20)) for r in (0, 1)])
    assert big is not None and big.est_speedup == pytest.approx(100 / 70, rel=1e-3)
    # Four small buckets: the last holds a quarter of the wait, half of which compression removes.
    four = rules.comm_exposed([record(r, shapes=shapes, dist=_bucketed(4, 500_000)) for r in (0, 1)])
    assert four is not None and four.evidence["hideable_comm_s_per_step"] == pytest.approx(0.030 - 0.030 / 4 / 2)


def test_occasional_descheduling_is_not_exposed_communication() -> None:
    # The last rank usually waits ~0.2 ms; on two steps its peer was descheduled for 30 ms.
    waits = [0.2, 0.2, 30, 0.3, 0.2, 30, 0.2, 0.2]
    shapes1 = [StepShape(100, fwd=20, bwd=70, opt=5, comm=w) for w in waits]
    shapes0 = [StepShape(100, fwd=20, bwd=70, opt=5, comm=50)] * 8
    assert rules.comm_exposed([record(0, shapes=shapes0), record(1, shapes=shapes1)]) is None


def test_per_rank_file_shards_are_correct_use_not_no_distributed_sampler() -> None:
    # Each rank reads its own shard of files with a plain sampler: the index streams are identical,
    # but index 0 of rank 0's files is not index 0 of rank 1's: no finding.
    perm = random.Random(0).sample(range(4096), 512)
    recs = []
    for r in (0, 1):
        info = dataclasses.replace(loader(perm, epoch=4096, sampler="RandomSampler"),
                                   dataset_paths=[f"/data/shard-{r}.bin"])
        recs.append(record(r, loaders=[info]))
    assert rules.no_distributed_sampler(recs) is None


def test_same_files_prove_same_samples_and_in_memory_data_is_not_certain() -> None:
    perm = random.Random(0).sample(range(4096), 512)
    same = [record(r, loaders=[dataclasses.replace(loader(perm, epoch=4096, sampler="RandomSampler"),
                                                   dataset_paths=["/data/train.bin"])]) for r in (0, 1)]
    f = rules.no_distributed_sampler(same)
    assert f is not None and f.certain and f.evidence["same_samples_proven"] is True
    in_memory = [record(r, loaders=[loader(perm, epoch=4096, sampler="RandomSampler")]) for r in (0, 1)]
    g = rules.no_distributed_sampler(in_memory)
    assert g is not None and not g.certain and g.evidence["same_samples_proven"] is False


def test_ranks_that_take_turns_arriving_last_have_no_straggler() -> None:
    # Rank 1 waits less on average (a few of its steps are slow), but step by step the ranks take
    # turns arriving last: a sign test over the shared steps finds no pattern, so no straggler.
    a = [StepShape(100, data=2, fwd=20, bwd=70, opt=5, comm=c) for c in (30, 10, 30, 10, 30, 10, 30, 10)]
    b = [StepShape(100, data=2, fwd=20, bwd=70, opt=5, comm=c) for c in (5, 25, 5, 25, 5, 25, 5, 12)]
    result = diagnose_records([record(0, shapes=a), record(1, shapes=b)])
    assert "RANK_STRAGGLER" not in ids(result.findings)
    # The same mean gap with rank 1 last in every step is a straggler, with the test's numbers.
    steady = [StepShape(100, data=2, fwd=20, bwd=70, opt=5, comm=w) for w in (26, 24, 27, 25, 26, 24, 27, 25)]
    c = [StepShape(100, data=2, fwd=20, bwd=70, opt=5, comm=w) for w in (14, 12, 15, 13, 14, 12, 15, 12)]
    result = diagnose_records([record(0, shapes=steady), record(1, shapes=c)])
    (straggler,) = [f for f in result.findings if f.id == "RANK_STRAGGLER"]
    assert straggler.rank == 1
    assert straggler.evidence["steps_arrived_last"] == straggler.evidence["steps_compared"]
    assert straggler.evidence["arrival_order_p"] < 0.05
