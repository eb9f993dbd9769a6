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
