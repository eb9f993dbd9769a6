"""Real H100 traces (torch 2.11, CUDA 13; tests/data/traces/h100/make_traces.py recorded them).

Each planted one pathology into an otherwise plain loop; the analysis must name it, and the
healthy one (bf16 autocast, pinned non_blocking copies, fused AdamW) must get no finding. They also
pin two facts only real traces showed: cuBLAS's Hopper kernel names (``nvjet_sm90_tst`` is bf16,
``sm80_xmma_..._ffma`` is fp32 on CUDA cores) and a host that runs steps ahead of the GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stave.diagnose.trace_report import analyze_paths

H100 = Path(__file__).resolve().parents[2] / "data" / "traces" / "h100"


def analyse(name: str):
    report = analyze_paths([H100 / f"{name}.json.gz"])
    return report.traces[0], report.findings


def test_fp32_mlp_is_no_mixed_precision_with_the_gpus_step_time() -> None:
    trace, findings = analyse("fp32")
    # 6 x 4096^2 fp32 linears at batch 2048 (~1.2 TFLOP per step) on CUDA cores: ~26 ms per step
    # of kernels, though each ProfilerStep annotation lasted ~3 ms (nothing in the loop waits).
    assert 0.020 < trace.step_time_median_s < 0.035
    matmul = trace.gpu.matmul_s
    assert matmul["fp32_no_tc"] > 0.8 * 4 * trace.step_time_median_s
    assert matmul["tensor_core_tf32"] == matmul["tensor_core_other"] == 0
    assert [f.id for f in findings] == ["NO_MIXED_PRECISION"]
    assert 2.0 < findings[0].est_speedup < 4.0  # bounded by the assumed 4x over CUDA cores


def test_healthy_bf16_loop_gets_no_finding() -> None:
    trace, findings = analyse("healthy")
    assert findings == []
    assert trace.gpu.low_precision_in_use
    # The nvjet bf16 GEMMs are counted as tensor-core low precision, not "unknown".
    assert trace.gpu.matmul_s["tensor_core_low"] > 0.3 * 4 * trace.step_time_median_s
    assert trace.gpu.matmul_s["tensor_core_other"] == 0


def test_pageable_copies_are_the_top_finding() -> None:
    _trace, findings = analyse("pageable")
    top = findings[0]
    assert top.id == "H2D_PAGEABLE" and top.severity in ("warning", "critical")
    # The shared estimator (stave.diagnose.shared_findings): the exposed pageable copy time runs
    # PINNED_COPY_SPEEDUP (2x) faster; here the copies are most of the step.
    e = top.evidence
    assert e["exposed_copy_per_step_s"] > 0.5 * e["step_time_s"]
    expected = e["step_time_s"] / (e["step_time_s"] - e["exposed_copy_per_step_s"] / 2)
    assert top.est_speedup == pytest.approx(expected, rel=0.01)


@pytest.mark.parametrize("name", ["kn-bf16_linear", "kn-fp32_conv"])
def test_kernel_name_rules_agree_with_the_launching_ops_dtypes(name: str) -> None:
    # Recorded with record_shapes=True: every kernel's launching op names its operand dtypes, the
    # ground truth the name rules guess at (a bf16 Linear's nvjet GEMMs; an fp32 conv's cuDNN
    # winograd/ffma/simt kernels).
    from stave.trace.kernels import classify_kernel
    from stave.trace.tables import load_trace

    data = load_trace(H100 / f"{name}.json.gz")
    assert data.operands_by_name
    matmuls = 0
    for i, operands in data.operands_by_name.items():
        c = classify_kernel(data.names[i])
        if not c.matmul:
            continue
        matmuls += 1
        expected = {"low"} if operands == "low" else {"fp32", "tf32"}
        assert c.precision in expected, (data.names[i], operands)
    assert matmuls >= 3
