"""The ``hta`` section: HTA's definitions on a small trace whose every number is worked out by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from stave.trace.analysis import analyze_trace
from stave.trace.hta_metrics import kernel_type
from trace_synth import kernel, launched, memcpy, runtime, step, write_trace


def _trace(tmp_path: Path) -> Path:
    events = [
        step(1, 0, 100), step(2, 100, 100), step(3, 200, 100),
        # Step 1: a GEMM (launch ends at 5, starts at 10: no host wait), a gap of 20 (kernel wait),
        # then an NCCL allreduce on stream 20 overlapping the next GEMM by 10.
        *launched("ampere_sgemm_128x64_nn", 1, 4, 10, 30, corr=1),
        *launched("void gemv2N_kernel<float>", 2, 3, 60, 20, corr=2),
        *launched("ncclKernel_AllReduce_RING_LL_Sum_float", 3, 2, 70, 40, corr=3, stream=20),
        # Step 2: launched late (at 150, after the previous kernel on stream 7 ended at 80): host wait.
        *launched("ampere_sgemm_128x64_nn", 150, 5, 160, 10, corr=4),
        runtime("cudaMemcpyAsync", 170, 2, corr=5),
        memcpy("Memcpy DtoH (Device -> Pageable)", 175, 5, corr=5, nbytes=400),
        runtime("cudaStreamSynchronize", 172, 10, corr=6),
        # Step 3 (the last): HTA's default scope drops what it launches.
        *launched("ampere_sgemm_128x64_nn", 210, 5, 400, 50, corr=7),
    ]
    return write_trace(tmp_path / "t.json", events)


def test_both_scopes_by_hand(tmp_path: Path) -> None:
    h = analyze_trace(_trace(tmp_path)).hta
    assert h is not None
    d = h["scopes"]["default"]
    assert d["gpu_rows"] == 5
    # Rows 10-40, 60-80, 70-110 (comm), 160-170, 175-180 (copy): span 170, busy 30+50+10+5,
    # compute 30+20+10.
    assert d["temporal"] == {"span_us": 170.0, "idle_us": 75.0, "compute_us": 60.0, "non_compute_us": 35.0}
    assert d["kernel_types_us"] == {"COMPUTATION": 50.0, "COMMUNICATION": 30.0,
                                    "COMPUTATION overlapping COMMUNICATION": 10.0}
    assert d["comm_comp_overlap"] == pytest.approx(10 / 40)
    by_stream = {s["stream"]: s for s in d["idle_breakdown"]}
    # Stream 7 gaps: 40->60 (launch at 2 < 40: kernel wait, 20 < 30), 80->160 (launch 150 > 80: host
    # wait), 170->175 (launch 170 = previous end: not later, 5 µs: kernel wait).
    assert by_stream[7]["host_wait_us"] == 80.0
    assert by_stream[7]["kernel_wait_us"] == 25.0
    assert by_stream[7]["gaps"] == {"host_wait": 1, "kernel_wait": 2, "other": 0}
    launch = d["launch"]
    assert launch["count"] == 5
    # Delays: 10-5, 60-5, 70-5, 160-155, 175-172 -> 5+55+65+5+3.
    assert launch["launch_delay_sum_us"] == 133.0
    assert launch["launch_delay_over_100us"] == 0
    kept = h["scopes"]["last_step_kept"]
    assert kept["gpu_rows"] == 6
    assert kept["temporal"]["span_us"] == 440.0


def test_whole_file_facts(tmp_path: Path) -> None:
    f = analyze_trace(_trace(tmp_path)).hta["facts"]
    assert f["kernels"] == {"count": 5, "union_us": 140.0, "sum_us": 150.0}
    assert f["memcpy"] == [{"direction": "DtoH", "host_memory": "Pageable", "count": 1, "bytes": 400,
                            "bytes_unknown": 0, "time_us": 5.0}]
    assert f["sync_calls"] == {"cudaStreamSynchronize": {"count": 1, "time_us": 10.0}}
    assert [s["kernels_launched"] for s in f["cpu_profiler_steps"]] == [3, 1, 1]
    assert [(s["start_ns"], s["end_ns"]) for s in f["cpu_profiler_steps"]] == [(0, 100_000), (100_000, 200_000),
                                                                              (200_000, 300_000)]
    assert len(f["gpu_aware_steps"]) == 3


def test_no_step_markers_keep_everything(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", [*launched("ampere_sgemm", 1, 4, 10, 30, corr=1),
                                              *launched("ampere_sgemm", 50, 4, 60, 30, corr=2)])
    h = analyze_trace(path).hta
    assert h["scopes"]["default"]["temporal"] == h["scopes"]["last_step_kept"]["temporal"]
    assert h["scopes"]["default"]["temporal"]["span_us"] == 80.0


@pytest.mark.parametrize(("name", "kind"), [
    ("ncclKernel_AllReduce_RING_LL_Sum_float", "COMMUNICATION"),
    ("Memcpy HtoD (Pinned -> Device)", "MEMORY"),
    ("Event Sync", "OTHER"),
    ("ampere_sgemm_128x64_nn", "COMPUTATION"),
])
def test_kernel_type_is_htas(name: str, kind: str) -> None:
    assert kernel_type(name) == kind


def test_profiled_step_after_unprofiled_ones(tmp_path: Path) -> None:
    # The unprofiled iteration before step 5 launched a long kernel (launch at -50) that still runs
    # when step 5 begins; step 5's own kernel comes after it. Work after the last step is apart too.
    events = [step(5, 0, 100)]
    events += launched("ampere_sgemm_128x64_nn", -50, 5, -40, 70, corr=1)
    events += launched("ampere_sgemm_128x64_nn", 10, 5, 40, 30, corr=2)
    events += launched("ampere_sgemm_128x64_nn", 150, 5, 160, 10, corr=3)
    a = analyze_trace(write_trace(tmp_path / "t.json", events))
    out = a.hta["facts"]["outside_steps"]
    assert out["launched_before_first_step"]["count"] == 1
    assert out["launched_before_first_step"]["time_us"] == 70.0
    assert out["launched_before_first_step"]["inside_step_windows_us"] == 30.0
    assert out["launched_after_last_step"]["count"] == 1
    assert [s["kernels_launched"] for s in a.hta["facts"]["cpu_profiler_steps"]] == [1]
    assert any("before the first profiled step" in n for n in a.notes)


def test_no_outside_note_when_steps_own_their_work(tmp_path: Path) -> None:
    events = [step(5, 0, 100)] + launched("ampere_sgemm_128x64_nn", 10, 5, 20, 30, corr=2)
    a = analyze_trace(write_trace(tmp_path / "t.json", events))
    assert a.hta["facts"]["outside_steps"]["launched_before_first_step"]["count"] == 0
    assert not any("before the first profiled step" in n for n in a.notes)
