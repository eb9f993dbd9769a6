"""The doctor's verdicts on records of real GPU runs (no GPU needed to judge them again).

Each record is the doctor's run of a planted script of benchmarks/scenarios/matrix_gpu.toml on a lent
H200 (session 22, torch 2.11.0+cu130, 16 cores), kept by ``benchmarks/scenarios.py --records``; the
speedups quoted are that matrix's interleaved measurements of each script's ``--fixed`` variant
(docs/benchmarks.md, "On a GPU: a lent H200").
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from stave.doctor.facade import diagnose
from stave.measure.record import RunRecord

H200 = Path(__file__).resolve().parents[2] / "data" / "records" / "h200"
# The matrix's estimate goal: within 1.5x of the measured fix.
ESTIMATE_FACTOR = 1.5


def findings(name: str) -> list[tuple[str, float]]:
    with gzip.open(H200 / f"{name}.rec.json.gz", "rt", encoding="utf-8") as f:
        record = RunRecord.from_dict(json.load(f), where=name)
    return [(f.id, f.est_speedup) for f in diagnose([record]).findings]


def test_a_healthy_gpu_bound_loop_gets_no_finding():
    # Its NVML reading came from before its 0.1 s of steps (0 %): NO_COMPILE 1.14x was said.
    assert findings("gpu_healthy-b8192-w4096") == []


def test_fp32_matmuls_are_priced_at_the_probes_bf16_ratio():
    # bf16 autocast measured 10.95x (spread 3 %). The estimate was 2.70x: a stale 37 % utilization
    # made a GPU-busy floor that bf16 did not shrink.
    got = findings("gpu_fp32_matmul-b8192-w4096")
    assert got[0][0] == "NO_MIXED_PRECISION"
    assert 10.95 / ESTIMATE_FACTOR <= got[0][1] <= 10.95 * ESTIMATE_FACTOR


def test_a_launch_bound_small_batch_is_named_first():
    # Batch 16 -> 512 measured 31.2x samples/s; the loader's fetch, fixed per batch, is priced per
    # sample, so the estimate stays under it (10.7x).
    got = findings("gpu_small_batch-b16-w512")
    assert got[0][0] == "SMALL_BATCH" and got[0][1] > 5.0


def test_main_process_loading_is_named_first():
    # 16 workers measured 8.3x on 16 vCPUs; the estimate prices 16 workers at 16 cores (16x).
    got = findings("gpu_data_main_process-b256")
    assert got[0][0] == "DATA_CPU_BOUND"


def test_cudnn_autotuning_off_is_said_but_not_priced():
    # Autotuning measured 1.03x (spread 23 %) on this ResNet-50: information, not an estimate.
    got = dict(findings("gpu_cudnn_benchmark_off-resnet50-b256-96px"))
    assert got.get("CUDNN_BENCHMARK_OFF") == 1.0


def test_a_run_too_short_for_nvml_says_so_and_how_many_steps_would_do():
    with gzip.open(H200 / "gpu_healthy-b8192-w4096.rec.json.gz", "rt", encoding="utf-8") as f:
        record = RunRecord.from_dict(json.load(f), where="healthy")
    notes = diagnose([record]).notes
    note = next(n for n in notes if n.startswith("GPU utilization not measured"))
    # 35 counted steps of 4.5 ms (0.10 s) against a 0.32 s period: about 115 more steps' worth.
    steps = int(note.split("--steps ")[1].split()[0])
    assert 100 <= steps <= 200
    # A run long enough for readings inside its steps has a utilization and no such note.
    with gzip.open(H200 / "gpu_data_main_process-b256.rec.json.gz", "rt", encoding="utf-8") as f:
        long_run = RunRecord.from_dict(json.load(f), where="data")
    assert not any(n.startswith("GPU utilization not measured") for n in diagnose([long_run]).notes)
