"""Synthetic doctor results for the report tests: realistic numbers, absent counters, two ranks.

A plain module (not the conftest) so test modules can import it by a name no other conftest shares.

Everything is computed from the step index (no random draws), so golden outputs are stable.
The run looks like the seed workload on a 2-core CPU: ResNet-18, batch 32, two loader workers
whose PIL transforms cannot keep up, so the step waits for data.
"""

from __future__ import annotations

from pathlib import Path

from stave.analyze.breakdown import summarize_steps
from stave.doctor.result import DoctorResult, rank_summary
from stave.diagnose.finding import Finding, rank_findings
from stave.measure import (
    ConfigSnapshot,
    CopyStat,
    FrameKey,
    HostSample,
    LoaderInfo,
    OptimizerInfo,
    PhaseSpan,
    ProbeResults,
    RunInfo,
    RunRecord,
    StackProfile,
    StageStat,
    StepRecord,
    TensorInfo,
    WorkerStats,
)

MS = 1_000_000
SOURCE = Path(__file__).resolve().parent / "data" / "sample_train.py"
T0 = 5_000_000_000_000  # an arbitrary perf_counter origin, as a real run has
SCRIPT = "/home/user/project/train.py"
WARMUP = 3
STEPS = 20
OUTLIER_STEP = 12  # a periodic checkpoint stall lands here


def hot_line(name: str) -> int:
    """The line number of ``# hot:<name>`` in the sample script."""
    for number, text in enumerate(SOURCE.read_text().splitlines(), start=1):
        if f"# hot:{name}" in text:
            return number
    raise LookupError(name)


def _phases(index: int, rank: int) -> dict[str, int]:
    wobble = (index * 7 % 5) * MS  # a few ms of step-to-step variation
    slow = 6 * MS * rank  # rank 1 decodes a little slower
    return {
        "data_wait": 92 * MS + wobble + slow + (150 * MS if index < WARMUP else 0),
        "h2d": 0,
        "forward": 48 * MS + (index % 2) * MS,
        "backward": 71 * MS + (index % 3) * MS,
        "optimizer": 9 * MS,
        "other": 4 * MS + (160 * MS if index == OUTLIER_STEP else 0),
    }


def make_record(rank: int = 0, script: str = SCRIPT) -> RunRecord:
    """One rank's measurements."""
    steps, spans = [], []
    t = T0 + 2_400 * MS + rank * 3 * MS
    for i in range(STEPS):
        ph = _phases(i, rank)
        start = t
        cursor = start
        for phase in ("data_wait", "forward", "backward", "optimizer"):
            if ph[phase]:
                spans.append(PhaseSpan(phase, cursor, cursor + ph[phase], step=i))
                cursor += ph[phase]
        end = cursor + ph["other"]
        steps.append(
            StepRecord(
                index=i, start_ns=start, end_ns=end,
                data_wait_ns=ph["data_wait"], h2d_ns=0, forward_ns=ph["forward"],
                backward_ns=ph["backward"], optimizer_ns=ph["optimizer"], samples=32,
                h2d_bytes=0, data_fetches=1, forward_calls=1, backward_calls=1,
                warmup=i < WARMUP, flop_counted=i == 1,
            )
        )
        t = end
    end_of_run = t

    host = []
    k = 0
    ts = T0 + 2_000 * MS
    while ts < end_of_run:
        step = max((s.index for s in steps if s.start_ns <= ts), default=-1)
        host.append(
            HostSample(
                t_ns=ts,
                cpu_main_pct=58.0 + (k % 4) * 3.5,
                cpu_workers_pct=186.0 - (k % 3) * 4.0,
                workers_alive=2,
                main_threads=7,
                cpu_system_pct=97.5 - (k % 2),
                iowait_pct=0.4,
                procs_running=4,
                disk_read_bytes_per_s=0.0,
                ctx_voluntary_per_s=410.0 + k,
                ctx_involuntary_per_s=95.0,
                rss_bytes=1_610_612_736 + k * 262_144,
                mem_available_bytes=19_327_352_832 - k * 262_144,
                page_cache_bytes=3_221_225_472,
                swap_in_bytes_per_s=0.0,
                swap_out_bytes_per_s=0.0,
                psi_cpu_some_pct=None,  # hidden in this container: absent, not zero
                psi_memory_some_pct=None,
                psi_io_some_pct=None,
                step=step,
            )
        )
        ts += 100 * MS
        k += 1

    def stages(scale: float) -> list[StageStat]:
        def st(name: str, samples: int, wall_us: float, cpu_frac: float) -> StageStat:
            wall = int(wall_us * 1000 * samples * scale)
            return StageStat(name, samples, wall, int(wall * cpu_frac))

        return [
            st("load", 320, 310.0, 0.93),
            st("Resize", 320, 1_850.0, 0.99),
            st("ToTensor", 320, 240.0, 0.98),
            st("Normalize", 320, 160.0, 0.99),
            st("collate", 320, 21.0, 1.0),
        ]

    workers = [
        WorkerStats(
            worker_id=0, pid=41_001 + 10 * rank, loader_id=0, samples=320, batches=10,
            getitem_wall_ns=int(2_560 * 1000 * 320), getitem_cpu_ns=int(2_510 * 1000 * 320),
            stages=stages(1.0), opens=322, read_calls=964, read_chars=3_170_304, read_bytes=0,
            alive_ns=5_900 * MS,
        ),
        WorkerStats(
            worker_id=1, pid=41_002 + 10 * rank, loader_id=0, samples=320, batches=10,
            getitem_wall_ns=int(2_610 * 1000 * 320), getitem_cpu_ns=int(2_540 * 1000 * 320),
            stages=stages(1.02),
            opens=None, read_calls=None, read_chars=None, read_bytes=None,  # counters hidden
            alive_ns=5_880 * MS,
        ),
    ]

    src = str(SOURCE)
    frames = [
        FrameKey(src, hot_line("module"), "<module>", True),
        FrameKey(src, hot_line("fetch"), "main", True),
        FrameKey(src, hot_line("forward"), "main", True),
        FrameKey(src, hot_line("backward"), "main", True),
        FrameKey(src, hot_line("step"), "main", True),
        FrameKey("/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", 733, "__next__", False),
        FrameKey("/venv/lib/python3.11/site-packages/torch/nn/modules/conv.py", 554, "_conv_forward", False),
        FrameKey("/venv/lib/python3.11/site-packages/torch/_tensor.py", 648, "backward", False),
        FrameKey("/venv/lib/python3.11/site-packages/torch/optim/sgd.py", 123, "step", False),
    ]
    stacks = [[0, 1, 5], [0, 2, 6], [0, 3, 7], [0, 4, 8], [0, 2]]
    samples = []
    for s in steps:
        ph = _phases(s.index, rank)
        t_cursor = s.start_ns
        for phase, stack_id in (("data_wait", 0), ("forward", 1), ("backward", 2), ("optimizer", 3), ("other", 4)):
            n = ph[phase] // (5 * MS)
            for j in range(n):
                samples.append([t_cursor + j * 5 * MS, s.index, phase, stack_id])
            t_cursor += ph[phase]
    profile = StackProfile(interval_ns=5 * MS, frames=frames, stacks=stacks, samples=samples)

    loader = LoaderInfo(
        loader_id=0, num_workers=2, batch_size=32, pin_memory=False, persistent_workers=False,
        prefetch_factor=2, drop_last=False, multiprocessing_context=None, dataset_type="FakeCIFAR",
        dataset_len=5000, sampler_type="RandomSampler", iterators_created=1, batches=STEPS,
        first_batch_wait_ns=[1_240 * MS],
    )
    config = ConfigSnapshot(
        device_type="cpu", device_name="Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz",
        bf16_native=False, torch_threads=2, torch_interop_threads=2, cores_usable=2, cores_total=2,
        loaders=[loader],
        batch=[
            TensorInfo("batch[0]", "torch.float32", [32, 3, 64, 64], "cpu", 32 * 3 * 64 * 64 * 4),
            TensorInfo("batch[1]", "torch.int64", [32], "cpu", 256),
        ],
        autocast_enabled=False, compiled=False, model_class="ResNet", model_params=11_181_642,
        param_dtypes={"torch.float32": 62}, conv_model=True, model_memory_format="contiguous",
        cudnn_benchmark=None, cudnn_deterministic=None, deterministic_algorithms=False,
        optimizers=[OptimizerInfo("SGD", 11_181_642, 62, foreach=None, fused=None, steps=STEPS)],
        forward_calls_per_step=1.0, flops_per_step=72_410_000_000,
    )
    run = RunInfo(
        script=script, args=["--size", "64", "--workers", "2"], started_at="2025-01-01T12:00:00+00:00",
        wall_ns=8_350 * MS, script_exit_code=0, stopped_by="steps", stave_version="0.1.0",
        torch_version="2.14.1", python_version="3.11.2", platform="Linux-6.1-x86_64",
        hostname="trainbox", pid=40_990 + 10 * rank, cpu_model=config.device_name, cores_usable=2,
        cores_total=2, ram_total_bytes=25_769_803_776, rank=rank, local_rank=rank, world_size=2,
        warmup_steps=WARMUP, requested_steps=STEPS,
    )
    return RunRecord(
        run=run, config=config, steps=steps, host=host, workers=workers,
        copies=[CopyStat("h2d", "torch.float32", pinned=False, non_blocking=False, count=0, nbytes=0, host_ns=0)],
        stacks=profile, spans=spans,
        probes=ProbeResults(bf16_speedup=0.62, bf16_probe_shape=[1024, 1024, 1024], threads_speedup=1.02,
                            threads_probe=[2, 2], op_overhead_ns=3_400.0),
        notes=["psutil could not read /proc/pressure: memory pressure is absent from this report"],
    )


def make_findings() -> list[Finding]:
    """Three findings of different severities, one with a multi-line fix."""
    return rank_findings(
        [
            Finding(
                id="DATA_CPU_BOUND",
                severity="critical",
                est_speedup=1.74,
                title="The step waits for data: 2 loader workers are CPU-bound on Resize",
                explanation="Data wait is 40% of the step while the machine's CPUs are 97% busy.",
                evidence={
                    "data_wait_share": 0.402,
                    "data_wait_s": 0.0941,
                    "cpu_system_pct": 97.1,
                    "top_stage": "Resize",
                    "top_stage_share": 0.716,
                    "workers": 2,
                },
                fix=(
                    "transform = transforms.Compose([\n"
                    "    transforms.ToTensor(),  # resize the tensor, not the PIL image\n"
                    "    transforms.Resize(64, antialias=True),\n"
                    "    transforms.Normalize(CIFAR_MEAN, CIFAR_STD),\n"
                    "])"
                ),
                lines=[f"{SCRIPT}:52"],
            ),
            Finding(
                id="STEP_OUTLIERS",
                severity="warning",
                est_speedup=1.12,
                title="1 step in 17 takes 2.5x the median",
                evidence={"outlier_steps": [12], "median_step_s": 0.228, "outlier_step_s": 0.392},
                fix="# Move the checkpoint save off the training thread or save less often.",
            ),
            Finding(
                id="NO_MIXED_PRECISION",
                severity="info",
                est_speedup=1.0,
                title="bf16 is slower than fp32 on this CPU: keep fp32",
                evidence={"bf16_speedup": 0.62, "bf16_native": False},
                fix="# nothing to change on this machine",
            ),
        ]
    )


def make_result(ranks: int = 2, script: str = SCRIPT) -> DoctorResult:
    """A doctor result of ``ranks`` processes (rank 0 is the main record)."""
    records = [make_record(r, script) for r in range(ranks)]
    record = records[0]
    return DoctorResult(
        record=record,
        summary=summarize_steps(record.steps),
        findings=make_findings(),
        ranks=[rank_summary(r) for r in records] if ranks > 1 else [],
        rank_records=records if ranks > 1 else [],
        notes=["--profile-steps was not given: no kernel-level trace"],
    )
