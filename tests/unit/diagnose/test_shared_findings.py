"""Findings the doctor and ``stave trace`` share keep one definition, estimator and fix per ID.

For SYNC_IN_LOOP, H2D_PAGEABLE, GPU_UNDERUSED, NO_MIXED_PRECISION and COMM_EXPOSED: each source's
finding is the shared definition (stave.diagnose.shared_findings) evaluated on what that source
measured (its evidence) and on its step model; the same model and numbers give the same estimate
whichever source supplies them; the same context gives the same fix text from both rules.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from synth_records import SCRIPT, healthy_config, healthy_record, host_series, make_steps, run_rule, stack_profile

from stave.analyze.breakdown import summarize_steps
from stave.analyze.step_inputs import step_inputs
from stave.analyze.step_model import StepInputs
from stave.diagnose.shared_findings import (
    COMM_EXPOSED,
    DEFINITIONS,
    GPU_UNDERUSED,
    H2D_PAGEABLE,
    NO_MIXED_PRECISION,
    SYNC_IN_LOOP,
    step_only_inputs,
    timeline_inputs,
)
from stave.diagnose.trace_report import analyze_paths, trace_findings
from stave.measure import CopyStat, ProbeResults, SyncSite
from tests.unit.dist.dist_factory import StepShape, record
from tests.unit.trace.trace_synth import launched, memcpy, op, runtime, step, write_trace

US = 1e-6
SHARED = ("SYNC_IN_LOOP", "H2D_PAGEABLE", "GPU_UNDERUSED", "NO_MIXED_PRECISION", "COMM_EXPOSED")
H100 = {"deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0}]}


# --- the doctor's side --------------------------------------------------------------------------


def gpu_record(phases=None, util=60.0, **cfg):
    steps = make_steps(phases or (lambda i: {"data_wait": 2.0, "h2d": 15.0, "forward": 30.0, "backward": 40.0,
                                             "optimizer": 5.0, "other": 8.0}))
    settings = {"device_type": "cuda", "device_name": "NVIDIA H100", "device_capability": [9, 0],
                "device_total_memory_bytes": 80 * 2**30, **cfg}
    rec = healthy_record(steps=steps, config=healthy_config(**settings),
                         probes=ProbeResults(op_overhead_ns=30_000.0, bf16_speedup=2.0))
    rec.host = host_series(steps, gpu_util_pct=util)
    return rec


def doctor_model(rec) -> tuple[StepInputs, float]:
    summary = summarize_steps(rec.steps)
    return step_inputs(rec, summary), summary


def test_doctor_sync_in_loop_is_the_shared_estimate() -> None:
    rec = gpu_record(util=55.0)
    rec.syncs = [SyncSite(".item()", SCRIPT, 61, "train", calls=43, steps_with_call=43)]
    rec.stacks = stack_profile(rec.steps, {"other": [(61, 1.0)], "forward": [(50, 1.0)]}, interval_ms=2.0)
    f = run_rule("SYNC_IN_LOOP", rec)
    model, summary = doctor_model(rec)
    e = f.evidence
    T = summary.step_time_median_s
    assert f.est_speedup == pytest.approx(
        SYNC_IN_LOOP.estimate(model, host_wait_s=e["host_wait_s_per_step"], device_s=e["gpu_busy_s_per_step"],
                              step_s=T), abs=2e-3)
    assert f.fix == SYNC_IN_LOOP.fix(pageable_copy=False)


def test_doctor_h2d_pageable_is_the_shared_estimate() -> None:
    rec = gpu_record()
    rec.copies = [CopyStat("h2d", "float32", False, False, count=80, nbytes=80 * 1_572_864, host_ns=10 * 10**6)]
    f = run_rule("H2D_PAGEABLE", rec)
    model, summary = doctor_model(rec)
    expected = H2D_PAGEABLE.estimate(model, pageable_copy_s=f.evidence["h2d_s"] * f.evidence["pageable_bytes_share"],
                                     step_s=summary.step_time_median_s)
    assert f.est_speedup == pytest.approx(expected, abs=2e-3)
    assert "pin_memory=True" in f.fix and f.fix.endswith(H2D_PAGEABLE.fix().splitlines()[-1])


def test_doctor_gpu_underused_is_the_shared_estimate_and_threshold() -> None:
    rec = gpu_record(lambda i: {"data_wait": 1.0, "forward": 20.0, "backward": 25.0, "optimizer": 4.0, "other": 50.0},
                     util=30.0)
    f = run_rule("GPU_UNDERUSED", rec)
    model, summary = doctor_model(rec)
    T = summary.step_time_median_s
    expected = GPU_UNDERUSED.estimate(model, host_gap_s=f.evidence["other_s"], device_s=0.3 * T, step_s=T)
    assert f.est_speedup == pytest.approx(expected, abs=2e-3)
    assert f.fix == GPU_UNDERUSED.fix()
    # The shared threshold: 80% busy is enough, just under it is not.
    busy = lambda i: {"forward": 20.0, "backward": 25.0, "optimizer": 4.0, "other": 50.0}  # noqa: E731
    assert run_rule("GPU_UNDERUSED", gpu_record(busy, util=100 * GPU_UNDERUSED.threshold.value)) is None
    assert run_rule("GPU_UNDERUSED", gpu_record(busy, util=100 * GPU_UNDERUSED.threshold.value - 5)) is not None


def test_doctor_no_mixed_precision_is_the_shared_estimate() -> None:
    rec = gpu_record()
    f = run_rule("NO_MIXED_PRECISION", rec)
    model, summary = doctor_model(rec)
    expected = NO_MIXED_PRECISION.estimate(model, [(f.evidence["autocast_s"], f.evidence["bf16_probe_speedup"])],
                                           summary.step_time_mean_s)
    assert f.est_speedup == pytest.approx(expected, abs=2e-3)
    assert f.fix == NO_MIXED_PRECISION.fix("cuda", (9, 0))


def test_doctor_comm_exposed_is_the_shared_estimate() -> None:
    shapes0 = [StepShape(100, fwd=20, bwd=70, opt=5, comm=40)] * 8
    shapes1 = [StepShape(100, fwd=20, bwd=70, opt=5, comm=30)] * 8
    from stave.diagnose.rules import dist

    f = dist.comm_exposed([record(0, shapes=shapes0), record(1, shapes=shapes1)])
    e = f.evidence
    expected = COMM_EXPOSED.estimate(step_only_inputs(e["step_time_s"]), exposed_s=e["exposed_comm_s_per_step"],
                                     device_s=None, step_s=e["step_time_s"])
    assert f.est_speedup == pytest.approx(expected, abs=2e-3)
    assert f.fix == COMM_EXPOSED.fix(data_parallel=True)


# --- the trace's side ---------------------------------------------------------------------------


def trace_report(tmp_path: Path, events: list[dict], metadata: dict | None = None):
    report = analyze_paths([write_trace(tmp_path / "t.json", events, metadata=metadata)])
    return report.traces[0], {f.id: f for f in trace_findings(report)}


@pytest.mark.parametrize("call", ["cudaStreamSynchronize", "hipStreamSynchronize"])  # and the renamed (ROCm) call
def test_trace_sync_in_loop_is_the_shared_estimate(tmp_path: Path, call: str) -> None:
    events = []
    for n, base in ((1, 0), (2, 100)):
        events += [step(n, base, 100), *launched("ampere_sgemm_128x64_nn", base + 1, 2, base + 5, 40, corr=10 * n + 1)]
        events += [op("aten::item", base + 10, 42), runtime(call, base + 11, 40, corr=10 * n + 2)]
        events += launched("ampere_sgemm_128x64_nn", base + 80, 2, base + 85, 10, corr=10 * n + 3)
    t, found = trace_report(tmp_path, events, H100)
    f = found["SYNC_IN_LOOP"]
    e = f.evidence
    T = t.step_time_median_s
    # The host blocked 40 µs per step; the GPU then idled from 45 until its next kernel at 85.
    assert e["host_blocked_per_step_s"] == pytest.approx(40 * US)
    assert e["gpu_needs_per_step_s"] == pytest.approx(T - 40 * US)
    expected = SYNC_IN_LOOP.estimate(timeline_inputs(T, t.breakdown_share), host_wait_s=e["host_blocked_per_step_s"],
                                     device_s=e["gpu_needs_per_step_s"], step_s=T)
    assert f.est_speedup == pytest.approx(expected, abs=2e-3)
    assert f.est_speedup == pytest.approx(100 / 60, abs=2e-3)  # the smaller of 40 blocked and 40 idle
    # The same context (a .item()-style sync, not a pageable copy) gives the doctor's fix text.
    assert f.fix == SYNC_IN_LOOP.fix(pageable_copy=False)


def test_trace_sync_estimate_is_the_smaller_of_blocked_and_idle(tmp_path: Path) -> None:
    # The case: calls that block a few µs in total are not charged the GPU's long idle.
    events = []
    for n, base in ((1, 0), (2, 1000)):
        events += [step(n, base, 1000), *launched("ampere_sgemm_128x64_nn", base + 1, 2, base + 5, 100, corr=10 * n + 1)]
        events += [runtime("cudaEventSynchronize", base + 110, 3, corr=10 * n + 2)]
        events += launched("ampere_sgemm_128x64_nn", base + 900, 2, base + 905, 50, corr=10 * n + 3)
    _t, found = trace_report(tmp_path, events, H100)
    assert "SYNC_IN_LOOP" not in found  # 3 µs blocked per 1 ms step: under the report threshold


def test_trace_gpu_underused_and_h2d_pageable_are_the_shared_estimates(tmp_path: Path) -> None:
    events = []
    for n, base in ((1, 0), (2, 200)):
        c = 10 * n
        events += [step(n, base, 200), op("aten::add", base + 100, 90)]
        events += [runtime("cudaMemcpyAsync", base + 1, 30, corr=c + 1),
                   memcpy("Memcpy HtoD (Pageable -> Device)", base + 2, 28, corr=c + 1, nbytes=1 << 20)]
        events += launched("ampere_sgemm_128x64_nn", base + 32, 2, base + 35, 40, corr=c + 2)
    t, found = trace_report(tmp_path, events, H100)
    T = t.step_time_median_s
    model = timeline_inputs(T, t.breakdown_share)
    g = found["GPU_UNDERUSED"]
    assert g.est_speedup == pytest.approx(GPU_UNDERUSED.estimate(
        model, host_gap_s=g.evidence["host_gap_per_step_s"], device_s=g.evidence["gpu_busy_per_step_s"], step_s=T),
        abs=2e-3)
    assert g.fix == GPU_UNDERUSED.fix()
    h = found["H2D_PAGEABLE"]
    assert h.est_speedup == pytest.approx(H2D_PAGEABLE.estimate(
        model, pageable_copy_s=h.evidence["exposed_copy_per_step_s"], step_s=T), abs=2e-3)
    assert h.fix == H2D_PAGEABLE.fix(None)


def test_trace_no_mixed_precision_and_comm_exposed_are_the_shared_estimates(tmp_path: Path) -> None:
    events = [step(1, 0, 1000)] + launched("ampere_sgemm_128x64_nn", 5, 5, 20, 400, corr=1)
    events += launched("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 10, 5, 450, 400,
                       corr=2, stream=20)
    t, found = trace_report(tmp_path, events, H100)
    T = t.step_time_median_s
    model = timeline_inputs(T, t.breakdown_share)
    p = found["NO_MIXED_PRECISION"]
    e = p.evidence
    assert p.est_speedup == pytest.approx(NO_MIXED_PRECISION.estimate(
        model, [(e["tf32_matmul_per_step_s"], e["assumed_speedup_over_tf32"]),
                (e["fp32_matmul_per_step_s"], e["assumed_speedup_over_fp32"])], T), abs=2e-3)
    c = found["COMM_EXPOSED"]
    assert c.est_speedup == pytest.approx(COMM_EXPOSED.estimate(
        model, exposed_s=c.evidence["exposed_communication_per_step_s"],
        device_s=t.part_mean_s("kernel") + t.part_mean_s("memcpy") + t.part_mean_s("memset"), step_s=T), abs=2e-3)


# --- the same inputs, the same answer -----------------------------------------------------------


def test_same_fix_text_from_both_sources(tmp_path: Path) -> None:
    # NO_MIXED_PRECISION on an sm90 GPU, COMM_EXPOSED for DDP's all-reduce: doctor and trace agree.
    doctor = run_rule("NO_MIXED_PRECISION", gpu_record())
    events = [step(1, 0, 1000)] + launched("ampere_sgemm_128x64_nn", 5, 5, 20, 400, corr=1)
    events += launched("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 10, 5, 450, 400,
                       corr=2, stream=20)
    _t, found = trace_report(tmp_path, events, H100)
    assert doctor.fix == found["NO_MIXED_PRECISION"].fix
    from stave.diagnose.rules import dist

    ddp = dist.comm_exposed([record(0, shapes=[StepShape(100, fwd=20, bwd=70, opt=5, comm=40)] * 8),
                             record(1, shapes=[StepShape(100, fwd=20, bwd=70, opt=5, comm=30)] * 8)])
    assert ddp.fix == found["COMM_EXPOSED"].fix


@pytest.mark.parametrize("finding_id", SHARED)
def test_same_model_and_numbers_give_the_same_estimate(finding_id: str) -> None:
    # A GPU step of 100 ms: 50 ms of compute kernels, 10 ms of copies, 40 ms of host work. The
    # trace's model (from its breakdown shares) and the same phases given directly, as a doctor run's
    # model of a GPU step holds them, price every shared fix alike.
    T = 0.100
    trace = timeline_inputs(T, {"kernel": 0.5, "memcpy": 0.1, "runtime": 0.1, "cpu_exec": 0.1, "other": 0.2})
    doctor = StepInputs(phases_s={"forward": 0.030, "backward": 0.020, "h2d": 0.010, "other": 0.040}, cores=8.0,
                        gpu=True)
    d = DEFINITIONS[finding_id]
    args = {
        "SYNC_IN_LOOP": {"host_wait_s": 0.02, "device_s": 0.07, "step_s": T},
        "H2D_PAGEABLE": {"pageable_copy_s": 0.01, "step_s": T},
        "GPU_UNDERUSED": {"host_gap_s": 0.03, "device_s": 0.06, "step_s": T},
        "NO_MIXED_PRECISION": {"matmul_s_and_ratio": [(0.04, 2.0)], "step_s": T},
        "COMM_EXPOSED": {"exposed_s": 0.02, "device_s": 0.05, "step_s": T},
    }[finding_id]
    est_trace, est_doctor = d.estimate(trace, **args), d.estimate(doctor, **args)
    assert est_trace == pytest.approx(est_doctor, abs=1e-9)
    assert est_trace > 1.05  # a real saving, not the trivial 1.0 both would give on bad input


def test_each_shared_id_has_one_definition_and_its_rules_use_it() -> None:
    from stave.diagnose.engine import registered_rules

    assert set(DEFINITIONS) == set(SHARED)
    for d in DEFINITIONS.values():
        assert d.threshold.reason and d.model_change
    kinds = {(r.id, r.kind) for r in registered_rules("doctor") + registered_rules("trace") + registered_rules("records")}
    for fid in SHARED:
        assert (fid, "trace") in kinds and ((fid, "doctor") in kinds or (fid, "records") in kinds)
