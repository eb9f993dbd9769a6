"""Synthetic doctor records for the rule tests: a healthy baseline and knobs for each mechanism.

Numbers are computed, not drawn, so every test is deterministic. The baseline is a healthy,
compute-bound CPU job: 40 counted steps of 100 ms, almost all forward/backward, two loader
workers that keep up, a machine at moderate load, every counter present.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from stave.analyze.breakdown import summarize_steps
from stave.diagnose.engine import registered_rules
from stave.diagnose.finding import Finding
from stave.diagnose.inputs import DoctorInput
from stave.measure import (
    ConfigSnapshot,
    FrameKey,
    HostSample,
    LoaderInfo,
    OptimizerInfo,
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
WARMUP = 3
STEPS = 43
SAMPLE_HZ = 10
SCRIPT = "/home/user/train.py"
BATCH = 32

Phases = dict[str, float]  # phase -> milliseconds


def healthy_phases(index: int) -> Phases:
    """A compute-bound step: 100 ms, 2 ms data wait, a little jitter."""
    jitter = (index * 7 % 5) * 0.4
    return {"data_wait": 2.0, "forward": 38.0 + jitter, "backward": 50.0, "optimizer": 6.0, "other": 4.0}


def make_steps(phases: Callable[[int], Phases] = healthy_phases, n: int = STEPS, warmup: int = WARMUP,
               samples: int = BATCH) -> list[StepRecord]:
    """Steps laid end to end; ``other`` is whatever the duration leaves after the measured phases."""
    out: list[StepRecord] = []
    t = 1_000 * MS
    for i in range(n):
        p = phases(i)
        duration = int(sum(p.values()) * MS)
        out.append(
            StepRecord(
                index=i,
                start_ns=t,
                end_ns=t + duration,
                data_wait_ns=int(p.get("data_wait", 0) * MS),
                h2d_ns=int(p.get("h2d", 0) * MS),
                forward_ns=int(p.get("forward", 0) * MS),
                backward_ns=int(p.get("backward", 0) * MS),
                optimizer_ns=int(p.get("optimizer", 0) * MS),
                samples=samples,
                data_fetches=1,
                warmup=i < warmup,
            )
        )
        t += duration
    return out


def host_series(steps: list[StepRecord], **fields: Callable[[int, int], Any] | Any) -> list[HostSample]:
    """Samples at :data:`SAMPLE_HZ` over the steps; a field is a constant or ``f(sample_i, step)``."""
    defaults: dict[str, Any] = {
        "cpu_main_pct": 180.0,
        "cpu_workers_pct": 30.0,
        "workers_alive": 2,
        "cpu_system_pct": 75.0,
        "iowait_pct": 0.5,
        "procs_running": 2,
        "disk_read_bytes_per_s": 0.0,
        "ctx_involuntary_per_s": 50.0,
        "rss_bytes": 2_000_000_000,
        "mem_available_bytes": 16_000_000_000,
        "page_cache_bytes": 4_000_000_000,
        "swap_in_bytes_per_s": 0.0,
        "swap_out_bytes_per_s": 0.0,
        "psi_cpu_some_pct": 5.0,
        "psi_memory_some_pct": 0.0,
        "psi_io_some_pct": 0.0,
    }
    defaults.update(fields)
    out: list[HostSample] = []
    start, end = steps[0].start_ns, steps[-1].end_ns
    interval = 1_000_000_000 // SAMPLE_HZ
    i = 0
    t = start + interval // 2
    while t < end:
        step = next(s.index for s in steps if s.start_ns <= t < s.end_ns)
        values = {k: (v(i, step) if callable(v) else v) for k, v in defaults.items()}
        out.append(HostSample(t_ns=t, step=step, **values))
        i += 1
        t += interval
    return out


def healthy_loader(**changes: Any) -> LoaderInfo:
    info = LoaderInfo(
        loader_id=0,
        num_workers=2,
        batch_size=BATCH,
        pin_memory=False,
        persistent_workers=True,
        prefetch_factor=2,
        drop_last=False,
        multiprocessing_context="fork",
        dataset_type="ImageDataset",
        dataset_len=10_000,
        sampler_type="RandomSampler",
        iterators_created=1,
        batches=STEPS,
        first_batch_wait_ns=[300 * MS],
    )
    return dataclasses.replace(info, **changes)


def worker(worker_id: int, samples: int, wall_us: float, cpu_us: float, *, run_delay_us: float | None = 0.0,
           stages: dict[str, tuple[float, float]] | None = None, opens: float | None = 1.0,
           read_calls: float | None = 3.0, read_chars: float | None = 12_000.0) -> WorkerStats:
    """One worker's account; per-sample figures are multiplied out. ``stages``: name -> (wall_us, cpu_us)."""
    if stages is None:
        stages = {"load": (wall_us * 0.6, cpu_us * 0.6), "Resize": (wall_us * 0.3, cpu_us * 0.3),
                  "collate": (wall_us * 0.1, cpu_us * 0.1)}
    getitem_wall = sum(w for name, (w, _c) in stages.items() if name != "collate")
    getitem_cpu = sum(c for name, (_w, c) in stages.items() if name != "collate")

    def tot(per_sample: float | None) -> int | None:
        return None if per_sample is None else int(per_sample * samples)

    return WorkerStats(
        worker_id=worker_id,
        pid=1000 + worker_id,
        samples=samples,
        batches=samples // BATCH,
        getitem_wall_ns=int(getitem_wall * 1e3 * samples),
        getitem_cpu_ns=int(getitem_cpu * 1e3 * samples),
        stages=[StageStat(n, samples, int(w * 1e3 * samples), int(c * 1e3 * samples)) for n, (w, c) in stages.items()],
        opens=tot(opens),
        read_calls=tot(read_calls),
        read_chars=tot(read_chars),
        read_bytes=0,
        alive_ns=5_000 * MS,
        run_delay_ns=None if run_delay_us is None else int(run_delay_us * 1e3 * samples),
    )


def healthy_config(**changes: Any) -> ConfigSnapshot:
    cfg = ConfigSnapshot(
        device_type="cpu",
        device_name="Test CPU",
        bf16_native=False,
        torch_threads=2,
        cores_usable=2,
        cores_total=2,
        loaders=[healthy_loader()],
        batch=[TensorInfo("batch[0]", "float32", [BATCH, 3, 64, 64], "cpu", BATCH * 3 * 64 * 64 * 4),
               TensorInfo("batch[1]", "int64", [BATCH], "cpu", BATCH * 8)],
        autocast_enabled=False,
        compiled=False,
        model_class="ResNet",
        model_params=11_000_000,
        param_dtypes={"float32": 11_000_000},
        conv_model=True,
        optimizers=[OptimizerInfo("SGD", 11_000_000, 62, foreach=None, fused=None)],
        flops_per_step=int(3e10),
        aten_ops_per_step=900,
        aten_ops_by_phase={"forward": 300, "backward": 450, "optimizer": 120, "other": 30},
        flops_by_phase={"forward": int(1e10), "backward": int(2e10)},
    )
    return dataclasses.replace(cfg, **changes)


def stack_profile(steps: list[StepRecord], lines_by_phase: dict[str, list[tuple[int, float]]],
                  interval_ms: float = 20.0) -> StackProfile:
    """Samples every ``interval_ms`` in each counted step: each phase's time split over user lines.

    ``lines_by_phase``: phase -> [(line number in SCRIPT, share of the phase's samples)].
    """
    prof = StackProfile(interval_ns=int(interval_ms * MS))
    frame_ids: dict[int, int] = {}
    stack_ids: dict[int, int] = {}

    def stack_for(line: int) -> int:
        if line not in stack_ids:
            frame_ids[line] = len(prof.frames)
            prof.frames.append(FrameKey(SCRIPT, line, "train", True))
            stack_ids[line] = len(prof.stacks)
            prof.stacks.append([frame_ids[line]])
        return stack_ids[line]

    for s in steps:
        t = s.start_ns
        for phase in ("data_wait", "h2d", "forward", "backward", "optimizer", "other"):
            n = int(round(s.phase_ns(phase) / prof.interval_ns))
            for line, share in lines_by_phase.get(phase, [(100, 1.0)]):
                for _ in range(int(round(n * share))):
                    prof.samples.append([t, s.index, phase, stack_for(line)])
                    t += prof.interval_ns
    return prof


def healthy_record(**changes: Any) -> RunRecord:
    """The baseline record; keyword arguments replace whole fields of :class:`RunRecord`."""
    steps = changes.pop("steps", None) or make_steps()
    per_worker = (STEPS * BATCH) // 2
    rec = RunRecord(
        run=RunInfo(script=SCRIPT, cores_usable=2, cores_total=2, warmup_steps=WARMUP),
        config=healthy_config(),
        steps=steps,
        host=host_series(steps),
        workers=[worker(0, per_worker, 1500.0, 1300.0), worker(1, per_worker, 1500.0, 1300.0)],
        probes=ProbeResults(bf16_speedup=None, threads_speedup=None, op_overhead_ns=3000.0),
    )
    rec.stacks = stack_profile(steps, {})
    for key, value in changes.items():
        setattr(rec, key, value)
    return rec


def rule_func(finding_id: str) -> Callable[[DoctorInput], Any]:
    """The registered doctor rule for ``finding_id``."""
    for r in registered_rules("doctor"):
        if r.id == finding_id:
            return r.func
    raise LookupError(finding_id)


def run_rule(finding_id: str, record: RunRecord) -> Finding | None:
    """Run one rule on a record; a list result must hold at most one finding of the ID."""
    result = rule_func(finding_id)(DoctorInput(record, summarize_steps(record.steps)))
    if isinstance(result, list):
        assert len(result) <= 1
        return result[0] if result else None
    return result


def run_all(record: RunRecord) -> list[Finding]:
    """Every doctor rule over a record, ranked (as the doctor does)."""
    from stave.diagnose.engine import run_rules

    notes: list[str] = []
    found = run_rules("doctor", DoctorInput(record, summarize_steps(record.steps)), notes)
    assert not notes, notes
    return found
