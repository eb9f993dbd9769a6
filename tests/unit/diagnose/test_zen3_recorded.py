"""The doctor's verdicts on records of real CPU runs where an earlier rule was wrong.

Each record is the doctor's run of a planted script of benchmarks/scenarios/matrix.toml on the
2-core AMD EPYC (Zen 3, AVX2) of sessions 18-23, kept by ``benchmarks/scenarios.py --records``
(or ``benchmarks.record_doctor``); the speedups quoted are the matrix's interleaved measurements of
the script's ``--fixed`` variant on that machine (docs/benchmarks.md).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from stave.doctor.facade import diagnose
from stave.measure.record import RunRecord

ZEN3 = Path(__file__).resolve().parents[2] / "data" / "records" / "zen3"


def findings(name: str):
    with gzip.open(ZEN3 / f"{name}.rec.json.gz", "rt", encoding="utf-8") as f:
        record = RunRecord.from_dict(json.load(f), where=name)
    return diagnose([record]).findings


def test_workers_are_not_advised_where_their_pessimistic_bound_gains_nothing():
    # Main-process PIL transforms, 81 % of the step waiting, two compute threads on two cores. Two
    # workers were named at 1.18x (the mean of 1.00x and 1.39x); they measured 0.85-0.89x in five
    # sessions here. The wait is still the job's: the top stage is named, workers are not.
    got = findings("cpu_transforms-base")
    data = next(f for f in got if f.id == "DATA_CPU_BOUND")
    assert "workers" not in data.evidence["model_inputs_changed"]
    assert "num_workers" not in data.fix and "not advised" in data.fix
    assert "GaussianBlur" in data.fix
    assert min(min(b) for b in data.evidence["workers_priced"].values()) < 1.05
    # The stage costing nothing is the upper bound; the finding is named at its mean with no change.
    up = data.evidence["top_stage_free_speedup"]
    assert up > 1.3 and abs(data.est_speedup - up ** 0.5) < 1e-3


def test_recompiling_for_new_lengths_is_not_called_a_leak():
    # torch.compile recompiling for varying lengths: RSS jumped 7-8 MB at two of five steps that
    # repeated a length and compiled nothing (the allocator), 0 at the others. Named a critical
    # MEMORY_GROWTH above RECOMPILES (3.0x estimated, 2.9x measured) before.
    got = findings("compile_varlen-len256")
    assert got[0].id == "RECOMPILES"
    assert "MEMORY_GROWTH" not in [f.id for f in got]


# Beside a busy loop in its own session pinned to one of the two cores (the matrix's hog), session 21.
# Alone, timm_optimizer_unfused's top finding is OPTIMIZER_UNFUSED (fused=True measured 1.45x) and
# lightning_small_batch's SMALL_BATCH (measured 17-20x); nanogpt_healthy has none.


def test_beside_a_busy_loop_the_jobs_own_top_finding_comes_second():
    # The ops under the parallel grain waited at the pool's barrier (0.65 s a step for timm's, bound
    # at 28 ms by their count): kept as one-thread time, the step at the free cores was 0.83 s and
    # OPTIMIZER_UNFUSED, 1.03x there, went unnamed beside the busy loop.
    timm = [f.id for f in findings("timm_optimizer_unfused-beside-busy-loop")]
    assert timm[:2] == ["MACHINE_BUSY", "OPTIMIZER_UNFUSED"]
    lightning = [f.id for f in findings("lightning_small_batch-beside-busy-loop")]
    assert lightning[:2] == ["MACHINE_BUSY", "SMALL_BATCH"]


def test_beside_a_busy_loop_a_healthy_loop_hears_only_about_the_machine():
    assert [f.id for f in findings("nanogpt_healthy-beside-busy-loop")] == ["MACHINE_BUSY"]


def test_machine_busy_prices_the_barrier_waits_of_the_jobs_own_ops():
    # The same script alone ran about 0.06-0.08 s a step; beside the busy loop 4.7 s (the pool's
    # barrier waits): MACHINE_BUSY said 4.9x before the ops' bound, which left those waits in.
    busy = findings("timm_optimizer_unfused-beside-busy-loop")[0]
    assert busy.id == "MACHINE_BUSY" and busy.est_speedup > 20
