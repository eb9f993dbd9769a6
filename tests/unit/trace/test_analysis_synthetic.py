"""The analysis on hand-built traces whose answers are worked out by hand (microseconds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stave.trace.analysis import analyze_trace
from stave.trace.kernels import classify_kernel, short_name
from trace_synth import annotation, launched, memcpy, op, pyframe, runtime, step, write_trace

US = 1e-6


def two_steps() -> list[dict]:
    events = []
    for k, base in enumerate((0, 100)):
        c = 10 * k
        events += [
            step(k + 1, base, 100),
            annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", base + 0, 20),
            op("aten::mm", base + 20, 12),
            *launched("ampere_sgemm_128x64_nn", base + 20, 5, base + 25, 30, corr=c + 1),
            runtime("cudaMemcpyAsync", base + 26, 4, corr=c + 2),
            memcpy("Memcpy HtoD (Pageable -> Device)", base + 50, 20, corr=c + 2, nbytes=1000),
            *launched("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", base + 85, 2, base + 88, 7, corr=c + 4),
        ]
    # Step 1 only: a .item() from the user's line, with its Python frame.
    events += [
        pyframe("train.py(12): train_step", 60, 30),
        pyframe("/usr/lib/python3.11/site-packages/torch/_tensor.py(40): item", 66, 20),
        op("aten::item", 68, 14),
        op("aten::_local_scalar_dense", 69, 12),
        runtime("cudaStreamSynchronize", 70, 10, corr=3),
    ]
    return events


@pytest.fixture(scope="module")
def analysis(tmp_path_factory: pytest.TempPathFactory):
    path = write_trace(tmp_path_factory.mktemp("t") / "two.json", two_steps(),
                       metadata={"distributedInfo": {"rank": 5, "world_size": 8}})
    return analyze_trace(path)


def test_steps_and_rank(analysis) -> None:
    assert analysis.rank == 5 and analysis.rank_source == "distributedInfo" and analysis.world_size == 8
    assert [s.number for s in analysis.steps] == [1, 2]
    assert [s.duration_s for s in analysis.steps] == pytest.approx([100 * US, 100 * US])


def test_additive_breakdown_by_hand(analysis) -> None:
    first = analysis.steps[0].parts_s
    expected = {"kernel": 30, "memcpy": 15, "memset": 0, "communication": 7, "runtime": 17,
                "dataloader": 20, "cpu_exec": 2, "other": 9}
    assert first == pytest.approx({k: v * US for k, v in expected.items()})
    for s in analysis.steps:
        assert sum(s.parts_s.values()) == pytest.approx(s.duration_s)
    # Step 2 has no sync: the runtime is 5 + 2, and item's time becomes "other".
    assert analysis.steps[1].parts_s["runtime"] == pytest.approx(7 * US)
    assert sum(analysis.breakdown_share.values()) == pytest.approx(1.0)


def test_gpu_summary(analysis) -> None:
    g = analysis.gpu
    assert g.utilization == pytest.approx(37 / 100)
    assert g.kernel_busy_s == pytest.approx(74 * US)
    assert g.communication_busy_s == pytest.approx(14 * US)
    assert g.communication_overlap == 0.0
    # Host wait: nccl kernels after memcpy (18 each) and step 2's first kernel after step 1's end (30).
    assert g.idle_host_wait_s == pytest.approx(66 * US)
    assert g.idle_short_gap_s == 0 and g.idle_other_s == 0
    (copy,) = g.memcpy
    assert (copy.direction, copy.host_memory, copy.count, copy.bytes) == ("HtoD", "pageable", 2, 2000)
    assert copy.bandwidth_bytes_per_s == pytest.approx(2000 / (40 * US))
    assert g.matmul_s["fp32_no_tc"] == pytest.approx(60 * US)
    assert not g.low_precision_in_use
    assert g.pageable_h2d_exposed_ns_per_step == [15_000, 15_000]


def test_sync_attributed_to_op_and_user_line(analysis) -> None:
    s = analysis.syncs
    assert s.calls == 1 and s.calls_per_step == 0.5
    (site,) = s.sites
    assert (site.call, site.op, site.file, site.line, site.function) == (
        "cudaStreamSynchronize", "aten::item", "train.py", 12, "train_step")
    # The GPU's last work (the copy, 50-70) ended as the call started: it waited for nothing, so no
    # GPU idle is charged to it, only its host time.
    assert site.gpu_idle_after_s == 0.0
    assert site.blocked_s == pytest.approx(10 * US)


def _sync_trace(tmp_path: Path, call: str, copy_name: str | None, kernel_end: float = 78) -> Path:
    events = [step(1, 0, 100), step(2, 100, 100)]
    events += launched("ampere_sgemm_128x64_nn", 5, 5, 10, kernel_end - 10, corr=1)
    events += [op("aten::to", 69, 12), runtime(call, 70, 10, corr=2)]
    if copy_name is not None:
        events.append(memcpy(copy_name, 78, 1, corr=2, nbytes=400))
    events += launched("ampere_sgemm_128x64_nn", 86, 2, 90, 5, corr=3)
    events += launched("ampere_sgemm_128x64_nn", 110, 2, 115, 80, corr=4)
    # After the last step: an end-of-loop synchronize is not the loop's.
    events.append(runtime("cudaDeviceSynchronize", 250, 30, corr=5))
    return write_trace(tmp_path / "t.json", events)


@pytest.mark.parametrize(("call", "copy", "blocking"), [
    ("cudaStreamSynchronize", None, True),
    ("cudaMemcpyAsync", "Memcpy DtoH (Device -> Pageable)", True),
    ("hipMemcpyAsync", "Memcpy DtoH (Device -> Pageable)", True),  # the renamed (ROCm) variant
    ("cudaMemcpyAsync", "Memcpy DtoH (Device -> Pinned)", False),  # pinned: the host does not wait
])
def test_blocking_calls_and_their_cost(tmp_path: Path, call: str, copy: str | None, blocking: bool) -> None:
    s = analyze_trace(_sync_trace(tmp_path, call, copy)).syncs
    assert s.calls == (1 if blocking else 0)
    if blocking:
        (site,) = s.sites
        assert site.blocked_s == pytest.approx(10 * US)
        # The GEMM ran until 78 during the call: from the call's start (70) to the next kernel (90),
        # minus the 8 µs the GPU was still busy.
        assert site.gpu_idle_after_s == pytest.approx(12 * US)
        assert s.largest_call.startswith(call) and s.largest_step == 1
        assert s.largest_share == pytest.approx(0.1)
        assert ("pageable" in s.largest_call) is (copy is not None)


def test_largest_blocking_call_is_named(tmp_path: Path) -> None:
    from stave.diagnose.trace_report import trace_findings
    from stave.diagnose.trace_report import analyze_paths

    # One pageable copy blocks 60 of the step's 100 µs (the GPU computes meanwhile).
    events = [step(1, 0, 100)]
    events += launched("ampere_sgemm_128x64_nn", 1, 2, 5, 70, corr=1)
    events += [op("aten::to", 9, 62), runtime("cudaMemcpyAsync", 10, 60, corr=2),
               memcpy("Memcpy DtoH (Device -> Pageable)", 75, 1, corr=2, nbytes=400)]
    events += launched("ampere_sgemm_128x64_nn", 90, 2, 95, 4, corr=3)
    report = analyze_paths([write_trace(tmp_path / "t.json", events)])
    found = {f.id: f for f in trace_findings(report)}
    assert "SYNC_IN_LOOP" in found
    assert "cudaMemcpyAsync (pageable copy)" in found["SYNC_IN_LOOP"].title
    assert "aten::to" in found["SYNC_IN_LOOP"].title


def test_top_ops_self_time(analysis) -> None:
    by_name = {o.name: o for o in analysis.top_ops}
    assert by_name["aten::item"].self_s == pytest.approx(2 * US)  # 14 minus the 12 of its child
    assert by_name["aten::mm"].calls == 2


def test_launch_bound_stretch(tmp_path: Path) -> None:
    events = [step(1, 0, 1000)]
    t = 0.0
    for i in range(40):
        # Launch takes 10 us, kernel 2 us: every kernel waits for the next launch.
        events += launched("tiny_kernel", t, 10, t + 11, 2, corr=i + 1)
        t += 12
    a = analyze_trace(write_trace(tmp_path / "lb.json", events))
    lb = a.launch
    assert lb.launch_bound_kernels == 40 and lb.stretches == 1 and lb.stretch_kernels == 40
    # The stretch spans first kernel start (11) to last end (11 + 39*12 + 2); idle = span - 40*2.
    span = 39 * 12 + 2
    assert lb.stretch_span_ns == span * 1000 and lb.stretch_idle_ns == (span - 80) * 1000


def test_no_step_markers_whole_trace_is_one_step(tmp_path: Path) -> None:
    events = [op("aten::add", 10, 5), op("aten::mul", 30, 10)]
    a = analyze_trace(write_trace(tmp_path / "nomark.json", events))
    assert not a.steps_marked and a.step_count == 1
    assert a.steps[0].duration_s == pytest.approx(30 * US)
    assert any("no ProfilerStep markers" in n for n in a.notes)
    assert a.kind == "cpu"


def test_last_marker_running_past_the_trace_is_clipped(tmp_path: Path) -> None:
    trace_span = {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
                  "tid": "PyTorch Profiler", "ts": 0, "dur": 40}
    events = [trace_span, step(1, 0, 1e7), op("aten::add", 5, 20)]
    a = analyze_trace(write_trace(tmp_path / "long.json", events))
    assert a.steps[0].duration_s == pytest.approx(40 * US)


def test_step_window_extends_to_gpu_work_it_launched(tmp_path: Path) -> None:
    events = [step(1, 0, 50), *launched("k", 10, 5, 40, 30, corr=1), step(2, 100, 50)]
    a = analyze_trace(write_trace(tmp_path / "ext.json", events))
    assert [s.duration_s for s in a.steps] == pytest.approx([70 * US, 50 * US])


def test_steps_follow_the_gpu_when_the_host_runs_ahead(tmp_path: Path) -> None:
    # Three 100 us annotations launch 1 ms of kernels each: nothing waits, so the host is done
    # before the GPU has finished the first step (an H100 fp32 MLP trace looked like this).
    events = [step(n, 100 * (n - 1), 100) for n in (1, 2, 3)]
    for n in (1, 2, 3):
        launch = 100 * (n - 1) + 10
        events += launched("k", launch, 5, 20 + 1000 * (n - 1), 1000, corr=n)
    a = analyze_trace(write_trace(tmp_path / "ahead.json", events))
    assert [s.duration_s for s in a.steps] == pytest.approx([1000 * US] * 3, rel=0.02)
    assert a.step_time_median_s == pytest.approx(1000 * US, rel=0.02)


@pytest.mark.parametrize(
    "name,group,matmul,tc,precision",
    [
        ("ampere_sgemm_128x64_nn", "compute", True, False, "fp32"),
        ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>(Params)", "compute", True, True, "tf32"),
        ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", "compute", True, True, "low"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "compute", True, True, "low"),
        ("nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_NNT", "compute", True, True, "low"),
        # Read off an H100 (torch 2.11, CUDA 13) profiling each dtype: bf16 is "tst", fp16 "hsh";
        # fp32 with TF32 off runs scalar-FMA kernels whose names still say xmma/cutlass.
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "compute", True, True, "low"),
        ("nvjet_tst_128x128_64x6_1x2_h_bz_bias_TNT", "compute", True, True, "low"),
        ("nvjet_sm90_hsh_128x256_64x4_2x1_v_bz_coopA_TNN", "compute", True, True, "low"),
        ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_"
         "kernel__5x_cublas", "compute", True, False, "fp32"),
        ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nt_align1>(cutlass_80_simt_sgemm_256x128_8x4_nt_"
         "align1::Params)", "compute", True, False, "fp32"),
        ("sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize128x32x8_stage3_warpsize2x2x1_g1_ffma_"
         "aligna4_alignc4_execute_kernel__5x_cudnn", "compute", True, False, "fp32"),
        ("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x256x32_warpgroupsize2x1x1_execute_segment_k_off_kernel"
         "__5x_cublas", "compute", True, True, "tf32"),
        ("sm90_xmma_wgrad_indexed_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize64x128x64_warpgroupsize"
         "1x1x1_g1_execute_segment_k_on_kernel__5x_cudnn", "compute", True, True, "low"),
        ("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80,"
         " true, 64, 64, 64, true, true>::Params)", "compute", True, False, "fp32"),
        ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4, false, false, cutlass::bfloat16_t>>(Params)",
         "compute", True, True, "low"),
        ("triton_tem_fused_mm_0", "compute", True, True, "unknown"),
        ("void gemmSN_TN_kernel<__half, 128, 16, 2, 4, 8, 9, false>(params)", "compute", True, False, "low"),
        ("cudnn::detail::implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false>", "compute", True,
         False, "fp32"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication", False,
         False, "fp32"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>(int)",
         "compute", False, False, "low"),
        ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda convert>(int)",
         "compute", False, False, "unknown"),
    ],
)
def test_kernel_classes(name: str, group: str, matmul: bool, tc: bool, precision: str) -> None:
    c = classify_kernel(name)
    assert (c.group, c.matmul, c.tensor_core, c.precision) == (group, matmul, tc, precision)


def test_short_names() -> None:
    assert short_name("void at::native::reduce_kernel<512, 1>(at::native::ReduceOp<float>)") == "at::native::reduce_kernel"
    assert short_name("at::cuda::(anonymous namespace)::spin_kernel(long)") == "at::cuda::(anonymous namespace)::spin_kernel"
    assert short_name("Memcpy HtoD (Pinned -> Device)") == "Memcpy HtoD (Pinned -> Device)"


def _stack_parents(start: list[int], end: list[int]) -> list[int]:
    """Reference: the call-stack sweep (events sorted by start, then longer first)."""
    parent, stack = [], []
    for s, e in zip(start, end):
        while stack and end[stack[-1]] <= s:
            stack.pop()
        parent.append(stack[-1] if stack else -1)
        stack.append(len(parent) - 1)
    return parent


@pytest.mark.parametrize("seed", range(10))
def test_vectorized_parents_match_call_stack_sweep(seed: int) -> None:
    from stave.trace.nesting import _parents

    rng = np.random.default_rng(seed)
    spans: list[tuple[int, int]] = []

    def grow(lo: int, hi: int, depth: int) -> None:
        t = lo
        while t < hi and depth < 6:
            s = int(rng.integers(t, hi + 1))
            e = int(rng.integers(s, hi + 1)) if rng.random() > 0.2 else s  # some zero-length events
            spans.append((s, e))
            if e > s:
                grow(s, e, depth + 1)
            t = e + int(rng.integers(0, 3))

    grow(0, 400, 0)
    spans.sort(key=lambda p: (p[0], -(p[1] - p[0])))
    start = np.array([p[0] for p in spans], dtype=np.int64)
    end = np.array([p[1] for p in spans], dtype=np.int64)
    assert _parents(start, end).tolist() == _stack_parents(start.tolist(), end.tolist())


def test_start_up_runtime_call_is_noted_but_waiting_calls_are_not(tmp_path: Path) -> None:
    # Step 1 holds a 600 us cudaMalloc (60% of the step): start-up work was profiled.
    events = [step(1, 0, 1000), runtime("cudaMalloc", 10, 600, corr=1)]
    events += launched("k", 700, 5, 710, 100, corr=2)
    a = analyze_trace(write_trace(tmp_path / "startup.json", events))
    assert any("cudaMalloc" in n and "after warm-up" in n for n in a.notes), a.notes
    # A synchronize that long waits for the GPU: the sync analysis covers it, no start-up note.
    events = [step(1, 0, 1000), runtime("cudaDeviceSynchronize", 10, 600, corr=1)]
    events += launched("k", 700, 5, 710, 100, corr=2)
    a = analyze_trace(write_trace(tmp_path / "sync.json", events))
    assert not any("runtime call" in n for n in a.notes), a.notes
    # Short launches in a normal step: no note.
    events = [step(1, 0, 1000)] + launched("k", 10, 5, 20, 900, corr=1)
    a = analyze_trace(write_trace(tmp_path / "normal.json", events))
    assert not any("runtime call" in n for n in a.notes), a.notes


@pytest.mark.parametrize("dtype,expected", [("float", "fp32"), ("c10::BFloat16", "low")])
def test_operand_dtypes_classify_a_kernel_its_name_does_not(tmp_path: Path, dtype: str, expected: str) -> None:
    # A GEMM from a library whose names stave does not know: with record_shapes the launching op's
    # "Input type" (joined by External id) gives its precision.
    events = [step(1, 0, 100)]
    events.append(op("aten::mm", 5, 30, **{"External id": 1, "Input type": [dtype, dtype]}))
    events += launched("vendorlib_gemm_kernel_v2", 10, 5, 20, 70, corr=1)
    a = analyze_trace(write_trace(tmp_path / "vendor.json", events))
    assert classify_kernel("vendorlib_gemm_kernel_v2").precision == "unknown"
    key = "fp32_no_tc" if expected == "fp32" else "low_no_tc"
    assert a.gpu.matmul_s[key] == pytest.approx(70 * US)
    assert a.gpu.low_precision_in_use is (expected == "low")


def test_operand_precision_reads_raw_json_and_lists_and_ignores_the_rest() -> None:
    import msgspec

    from stave.trace.kernels import operand_precision

    assert operand_precision(msgspec.Raw(b'["c10::BFloat16", "c10::BFloat16", ""]')) == "low"
    assert operand_precision(msgspec.Raw(b'["float", "ScalarList"]')) == "fp32"
    assert operand_precision(msgspec.Raw(b'["float", "c10::Half"]')) == "low"
    assert operand_precision(msgspec.Raw(b'["long int", "bool"]')) is None
    assert operand_precision(msgspec.Raw(b"7")) is None and operand_precision(msgspec.Raw(b"")) is None
    assert operand_precision(msgspec.Raw(b'"float"')) is None  # not a list
    assert operand_precision(["c10::Float8_e4m3fn"]) == "low"  # the lenient reader keeps a list
    assert operand_precision([7, None, ["float"]]) is None
    assert operand_precision(None) is None


@pytest.mark.parametrize(
    "name",
    [
        # FBGEMM's embedding, permute and quantization kernels: "gemm" in the name, no GEMM.
        "void fbgemm_gpu::split_embedding_codegen_forward_unweighted_kernel<c10::Half, float>(int)",
        "void fbgemm_gpu::permute_2D_data_kernel<c10::BFloat16>(int)",
        "void fbgemm_gpu::quantize_fp8_row_kernel<c10::BFloat16>(int)",
        # Triton's fused pointwise kernels named after the op they follow.
        "triton_poi_fused_convolution_backward_0",
        # The same as a renamed variant: a vendor's GEMM-ish name of no known family.
        "acme_hgemm_fp16_kernel",
    ],
)
def test_unknown_family_is_not_a_matmul(name: str) -> None:
    assert not classify_kernel(name).matmul


def test_fbgemm_cutlass_gemm_is_a_matmul() -> None:
    c = classify_kernel("void cutlass::Kernel<fbgemm_gpu::f8f8bf16_rowwise_cutlass_sm90_tensorop>(Params)")
    assert c.matmul and c.tensor_core


@pytest.mark.parametrize("kname", ["void fbgemm_gpu::batched_unary_embeddings_forward_kernel<c10::Half>(int)",
                                   "acme_hgemm_fp16_kernel"])
def test_no_precision_finding_on_unknown_family(tmp_path: Path, kname: str) -> None:
    from stave.diagnose.trace_report import trace_findings
    from stave.diagnose.trace_report import analyze_paths

    # fp16 is in use (a known bf16 GEMM runs briefly); the long kernel's family is unknown.
    events = [step(1, 0, 1000)]
    events += launched("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_tn", 5, 5, 20, 10, corr=1)
    events += launched(kname, 10, 5, 40, 900, corr=2)
    report = analyze_paths([write_trace(tmp_path / "t.json", events)])
    ids = {f.id for f in trace_findings(report)}
    assert "TENSOR_CORES_UNUSED" not in ids and "NO_MIXED_PRECISION" not in ids


def test_known_family_without_tensor_cores_still_found(tmp_path: Path) -> None:
    from stave.diagnose.trace_report import trace_findings
    from stave.diagnose.trace_report import analyze_paths

    # The positive control of the test above: cuBLAS's fp16 GEMM on CUDA cores is a real finding.
    events = [step(1, 0, 1000)]
    events += launched("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_tn", 5, 5, 20, 10, corr=1)
    events += launched("void gemmSN_TN_kernel<__half, 128, 16, 2, 4, 8, 9, false>(params)", 10, 5, 40, 900, corr=2)
    report = analyze_paths([write_trace(tmp_path / "t.json", events)])
    assert "TENSOR_CORES_UNUSED" in {f.id for f in trace_findings(report)}


def _fp32_gemm_trace(tmp_path: Path, name: str, major: int | None) -> Path:
    events = [step(1, 0, 1000)] + launched("ampere_sgemm_128x64_nn", 5, 5, 20, 900, corr=1)
    meta = {} if major is None else {"deviceProperties": [{"id": 0, "name": name, "computeMajor": major,
                                                           "computeMinor": 0}]}
    return write_trace(tmp_path / "t.json", events, metadata=meta)


# The device family comes from the compute capability, not the name: each name is paired with the
# other family's capability (a renamed device).
@pytest.mark.parametrize(("name", "major", "dtype"), [
    ("Tesla V100-SXM2-32GB", 7, "float16"),
    ("NVIDIA A100-SXM4-80GB", 7, "float16"),
    ("Tesla V100-SXM2-32GB", 8, "bfloat16"),
    ("NVIDIA H100 80GB HBM3", 9, "bfloat16"),
])
def test_precision_advice_follows_compute_capability(tmp_path: Path, name: str, major: int, dtype: str) -> None:
    from stave.diagnose.trace_report import trace_findings
    from stave.diagnose.trace_report import analyze_paths

    report = analyze_paths([_fp32_gemm_trace(tmp_path, name, major)])
    found = {f.id: f for f in trace_findings(report)}
    fix = found["NO_MIXED_PRECISION"].fix
    assert f"dtype=torch.{dtype}" in fix
    assert ("GradScaler(" in fix) is (dtype == "float16")


def test_no_precision_advice_without_tensor_cores(tmp_path: Path) -> None:
    from stave.diagnose.trace_report import trace_findings
    from stave.diagnose.trace_report import analyze_paths

    report = analyze_paths([_fp32_gemm_trace(tmp_path, "Tesla P100-PCIE-16GB", 6)])
    assert "NO_MIXED_PRECISION" not in {f.id for f in trace_findings(report)}


# Exposed communication, its kind from the kernel name: each pair is a kind and a renamed variant
# (another library's spelling) of it.
@pytest.mark.parametrize(("kname", "bucket_advice"), [
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", True),
    ("rccl_kernel_all_reduce_sum_bf16", True),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", True),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", False),
    ("ncclDevKernel_AllToAll_RING_LL(ncclDevKernelArgsStorage<4096ul>)", False),
])
def test_comm_advice_fits_the_collective(tmp_path: Path, kname: str, bucket_advice: bool) -> None:
    from stave.diagnose.trace_report import trace_findings
    from stave.diagnose.trace_report import analyze_paths

    events = [step(1, 0, 1000)] + launched("ampere_sgemm_128x64_nn", 5, 5, 20, 200, corr=1)
    events += launched(kname, 10, 5, 300, 600, corr=2, stream=20)
    report = analyze_paths([write_trace(tmp_path / "t.json", events)])
    found = {f.id: f for f in trace_findings(report)}
    assert "COMM_EXPOSED" in found
    assert ("bucket_cap_mb" in found["COMM_EXPOSED"].fix) is bucket_advice


@pytest.mark.parametrize(("compute_stream", "copy_stream"), [(7, 20), (20, 7)])  # and renamed streams
def test_queue_delay_ignores_an_idle_extra_stream(tmp_path: Path, compute_stream: int, copy_stream: int) -> None:
    # Step 1 launches 300 µs of GPU work; step 2's annotation (100-120) launches a copy on an idle
    # stream (it starts at once) and a kernel that queues behind step 1's until 300.
    events = [step(1, 0, 100), step(2, 100, 20)]
    events += launched("ampere_sgemm_128x64_nn", 5, 5, 10, 290, corr=1, stream=compute_stream)
    events += [runtime("cudaMemcpyAsync", 101, 3, corr=2),
               memcpy("Memcpy HtoD (Pinned -> Device)", 105, 2, corr=2, nbytes=64, stream=copy_stream)]
    events += launched("ampere_sgemm_128x64_nn", 110, 5, 300, 50, corr=3, stream=compute_stream)
    a = analyze_trace(write_trace(tmp_path / "t.json", events))
    # Step 2's window starts where its own kernel's queueing puts it: 100 + (300 - 110).
    assert a.steps[1].start_s == pytest.approx(290 * US)
    assert a.steps[1].duration_s == pytest.approx(60 * US)


# A profiled step after unprofiled ones: the previous iteration's kernel (launched at -150, before any
# ProfilerStep annotation) still runs on another stream during step 1, which launches 30 µs of its
# own. Variants: renamed (another step number, other kernel names); and the negative, where the
# previous iteration is profiled too, so its kernel is that step's own.
@pytest.mark.parametrize(("number", "kname", "prev_profiled"), [
    (1, "ampere_sgemm_128x64_nn", False),
    (7, "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32", False),
    (1, "ampere_sgemm_128x64_nn", True),
])
def test_work_launched_before_the_first_profiled_step_is_apart(tmp_path: Path, number: int, kname: str,
                                                               prev_profiled: bool) -> None:
    events = [op("aten::mm", -160, 20), *launched(kname, -150, 5, 0, 60, corr=1, stream=20)]
    if prev_profiled:
        events.append(step(number - 1, -200, 200))
    events += [step(number, 0, 100), *launched(kname, 10, 5, 15, 30, corr=2, stream=7)]
    a = analyze_trace(write_trace(tmp_path / "t.json", events))
    this = a.steps[-1]
    assert this.number == number and this.start_s - a.steps[0].start_s >= 0
    outside = a.hta["facts"]["outside_steps"]["launched_before_first_step"]
    if prev_profiled:
        # The previous step launched it: it is that step's, not step `number`'s.
        assert a.step_count == 2 and outside["count"] == 0
        assert this.parts_s["kernel"] == pytest.approx(30 * US)
        assert a.steps[0].parts_s["kernel"] == pytest.approx(0.0)  # its kernel ran after its window
        assert not any("before the first profiled step" in n for n in a.notes)
    else:
        assert a.step_count == 1
        assert this.parts_s["kernel"] == pytest.approx(30 * US)  # not the 60 µs union with the old kernel
        assert a.gpu.kernel_busy_s == pytest.approx(30 * US)
        assert outside["count"] == 1 and outside["inside_step_windows_us"] == pytest.approx(60)
        assert any("before the first profiled step" in n and "leave it out" in n for n in a.notes)
    assert sum(this.parts_s.values()) == pytest.approx(this.duration_s, abs=1e-12)


def test_work_launched_after_the_last_step_is_in_no_step(tmp_path: Path) -> None:
    # An end-of-loop launch (after the last annotation) whose kernel starts inside the last window
    # (the window reaches out to step 1's own late kernel): not step 1's work.
    events = [step(1, 0, 50), *launched("ampere_sgemm_128x64_nn", 10, 5, 20, 100, corr=1, stream=7)]
    events += launched("ampere_sgemm_128x64_nn", 60, 5, 70, 40, corr=2, stream=20)
    a = analyze_trace(write_trace(tmp_path / "t.json", events))
    (only,) = a.steps
    assert only.duration_s == pytest.approx(120 * US)
    assert only.parts_s["kernel"] == pytest.approx(100 * US)
    after = a.hta["facts"]["outside_steps"]["launched_after_last_step"]
    assert after["count"] == 1 and after["inside_step_windows_us"] == pytest.approx(40)


@pytest.mark.parametrize("comm_name", [
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "rccl_kernel_all_reduce_sum_bf16",  # renamed (another library's spelling)
])
def test_queue_delay_is_not_taken_from_a_waiting_communication_stream(tmp_path: Path, comm_name: str) -> None:
    # One compute kernel starts at once; one collective (as many kernels on its stream) waits 440 µs
    # on its peers. The step is the annotation's, not shifted by the collective's wait.
    events = [step(1, 0, 1000)] + launched("ampere_sgemm_128x64_nn", 5, 5, 20, 400, corr=1)
    events += launched(comm_name, 10, 5, 450, 400, corr=2, stream=20)
    a = analyze_trace(write_trace(tmp_path / "t.json", events))
    assert a.steps[0].duration_s == pytest.approx(1000 * US)
    assert a.steps[0].parts_s["kernel"] == pytest.approx(400 * US)
