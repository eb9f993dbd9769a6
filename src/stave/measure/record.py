"""Everything one process measured: the unit the analysis reads and a rank writes to disk."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stave.errors import FormatError, InputError
from stave.measure.config import ConfigSnapshot
from stave.measure.dist import DistInfo
from stave.measure.host import HostSample
from stave.measure.pipeline import CopyStat, SyncSite, WorkerStats
from stave.measure.serialize import from_dict, to_dict
from stave.measure.stacks import StackProfile
from stave.measure.steps import PhaseSpan, StepRecord

RECORD_SCHEMA = "stave.record/1"


@dataclass
class RunInfo:
    """Who ran what, where, and how it ended."""

    script: str = ""
    args: list[str] = field(default_factory=list)
    module: bool = False
    started_at: str = ""
    wall_ns: int = 0
    script_exit_code: int | None = None
    stopped_by: str = "end"
    error: str | None = None
    stave_version: str = ""
    torch_version: str = ""
    python_version: str = ""
    platform: str = ""
    hostname: str = ""
    pid: int = 0
    cpu_model: str = ""
    cores_usable: int | None = None
    cores_total: int | None = None
    ram_total_bytes: int | None = None
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    warmup_steps: int = 0
    requested_steps: int | None = None
    profile_steps: int = 0
    monitor_cpu_s: float | None = None


@dataclass
class ProbeResults:
    """Short measurements the doctor takes after the script ends (never during it).

    ``bf16_speedup``: fp32 matmul time over bf16 matmul time on this device (>1: bf16 is faster).
    ``threads_speedup``: time of a matmul with the script's torch thread count over the same with
    one thread per usable core (>1: the script's setting oversubscribes).
    ``op_overhead_ns``: fixed host cost of one tiny tensor op (dispatch and launch overhead).
    """

    bf16_speedup: float | None = None
    bf16_probe_shape: list[int] = field(default_factory=list)
    threads_speedup: float | None = None
    threads_probe: list[int] = field(default_factory=list)
    # The same elementwise work (an activation and a residual add over each GEMM's output) at the
    # script's thread count over one per core: memory-bound ops pay the threads' wake-ups and
    # barrier that a GEMM hides behind its arithmetic. ``threads_speedup`` is the GEMMs' ratio.
    threads_elementwise_speedup: float | None = None
    # "own_shapes": the thread probe timed the step's own GEMM shapes and their outputs (weighted by
    # their count per step) at both thread counts; "own_outputs": their outputs, with one square
    # GEMM for the GEMMs (shapes too large to fit, compute-bound like it); "generic": one square
    # GEMM and one layer-sized activation.
    threads_probe_source: str = "generic"
    op_overhead_ns: float | None = None
    # A copy to the GPU from pageable memory over the same copy from pinned memory (non_blocking,
    # drained), timed after a GPU run that copied from pageable memory, at the size of its copies
    # (``pinned_copy_probe_bytes``): what pinning buys on this machine's link (monitor/probes.py).
    pinned_copy_speedup: float | None = None
    pinned_copy_probe_bytes: int | None = None
    # FLOP/s of the bf16 probe's fp32 matmul: turns the step's counted matmul/conv FLOPs into the
    # time autocast can shorten (the rest of forward/backward stays fp32).
    fp32_matmul_flops_per_s: float | None = None
    # FLOP/s of the step's own matrix products in the dtype they ran in (bf16 under autocast; the
    # fp32 rate for an fp32 step): the arithmetic floor of forward/backward (SMALL_BATCH, MFU).
    matmul_flops_per_s: float | None = None
    # The intra-op threads the products were timed at for ``matmul_flops_per_s`` (the precision probe
    # runs at the script's threads; the rate probe at no more than the cores). None: unknown.
    matmul_rate_threads: int | None = None
    # An unfused optimizer's step time over fused=True's and over foreach=True's (None: not probed,
    # or that implementation is the run's own), measured here on tensors of the run's optimizer's
    # own sizes (monitor/optimizer_probe.py); [tensors, values] of that probe.
    optimizer_fused_ratio: float | None = None
    optimizer_foreach_ratio: float | None = None
    optimizer_probe: list[int] = field(default_factory=list)
    # The intra-op threads the optimizer probe ran at: the script's, or beside other busy processes
    # the cores they left free (None: not probed, or a record from before it was kept).
    optimizer_probe_threads: int | None = None
    # The run's own implementation's median step in that probe, seconds, on its [tensors, values]
    # (None: not probed, or a record from before it was kept).
    optimizer_own_step_s: float | None = None
    # Eager attention's and SDPA's seconds for one attention call, forward and backward, at the
    # run's [batch, heads, seq, head_dim] (attention_probe), measured here after a run whose HF
    # model ran attn_implementation="eager" (monitor/attention_probe.py).
    attention_eager_s: float | None = None
    attention_sdpa_s: float | None = None
    attention_probe: list[int] = field(default_factory=list)
    # The share of eager attention's temporaries the run faulted in afresh each step, which the
    # times above include (0: warm heap; None: not measured; monitor/attention_probe.fresh_share).
    attention_fresh_share: float | None = None
    # "own_shapes": the bf16 ratio and fp32 rate come from the step's own GEMM shapes, weighted by
    # their count per step; "generic": one square GEMM (a compiled model's shapes are not counted).
    bf16_probe_source: str = "generic"
    bf16_probe_shapes: list[list[int]] = field(default_factory=list)
    # The probe's pairs spread beyond what a quiet core shows even after a repeat: other load.
    bf16_probe_disturbed: bool = False
    # A matmul at the script's thread count timed beside one busy process over the same alone
    # (monitor/probes.py, CPU runs): how much one more runnable thread than the cores slows the
    # step's parallel ops on this machine (fair sharing alone predicts (t + 1) / c; ops whose threads
    # meet at a barrier wait for the one that lost its core, so it is often more); [threads, cores].
    neighbour_stretch: float | None = None
    neighbour_probe: list[int] = field(default_factory=list)
    # What the neighbour probe timed: "own_shapes" (the step's products, by their count per step)
    # or "square" (one matmul, where they did not fit its slice or were not counted).
    neighbour_probe_source: str | None = None
    # Seconds per byte that collating a batch into shared memory (what a loader worker does with
    # every batch) costs beyond an ordinary collate (monitor/shm_probe.py); probed only after a
    # run that loaded in the main process, which never paid it. ``shm_probe_bytes``: batch size timed.
    shm_collate_s_per_byte: float | None = None
    shm_probe_bytes: int | None = None
    # Seconds each of the intra-op pool's threads keeps spinning on a core after a parallel region
    # before it sleeps (monitor/probes.py, CPU runs with a pool that fits the cores): what a trainer
    # that waits for its data still takes from the loader workers. ``None``: not probed, or longer
    # than the probe's window (``pool_spin_probe``: [threads, window in ms]), read as the whole wait.
    pool_spin_s: float | None = None
    pool_spin_probe: list[int] = field(default_factory=list)
    # Seconds the first parallel op after the main thread's wait for data takes beyond the same op
    # back to back: waking the pool's sleeping threads (on a VM, their idle vCPUs), paid once per
    # step whose wait outlasts the pool's spin (monitor/probes.py wake probe, CPU runs whose steps
    # waited). Measured after sleeping the run's median wait; ``pool_wake_min_wait_s``: the shortest
    # wait of the probe's ladder that already paid half of it (shorter waits leave the pool awake).
    # ``pool_wake_probe``: [threads, the run's median wait in ms].
    pool_wake_s: float | None = None
    pool_wake_min_wait_s: float | None = None
    pool_wake_probe: list[int] = field(default_factory=list)
    # After a run that loaded in the main process: seconds a batch of the run's shapes takes fetched
    # in the main process, from one loader worker back to back, and in ``next()`` when it was
    # already waiting (the trainer's receive) (monitor/delivery_probe.py).
    delivery_main_s: float | None = None
    delivery_worker_s: float | None = None
    delivery_receive_s: float | None = None
    # The trainer's first read of a received batch beyond a second read (mapping the worker's
    # shared-memory pages); also probed after a worker run whose batch holds float64 tensors.
    delivery_touch_s: float | None = None
    # Share of the step's own GEMM time (weighted by each shape's count per step) that does not grow
    # with the batch: each shape timed at its batch rows and at [growth] times them; the per-call
    # part is what the line through the two times leaves at zero rows (monitor/probes.py).
    # ``gemm_scale_probe``: [growth, shapes with a batch dimension timed].
    gemm_fixed_share: float | None = None
    gemm_scale_probe: list[int] = field(default_factory=list)
    # A shape's pairs spread beyond what a quiet core shows even after a repeat (other load): its
    # median was kept, and the fixed share is marked less certain rather than dropped.
    gemm_scale_disturbed: bool = False
    # After a run beside other busy processes (they held at least MACHINE_BUSY_MIN_CORES of its
    # cores): the step's products and the elementwise ops on their outputs at the script's thread
    # count over at the cores those processes left free, timed beside them (monitor/probes.py). A
    # pool that outnumbers the free cores waits at every op's barrier for the thread sharing a core
    # with them. ``busy_threads_probe``: [threads, free cores]. The rate and batch-scaling probes
    # then run at the free cores too.
    busy_threads_speedup: float | None = None
    busy_threads_elementwise_speedup: float | None = None
    busy_threads_probe: list[int] = field(default_factory=list)


@dataclass
class RunRecord:
    """The doctor's measurements of one process (one rank)."""

    run: RunInfo = field(default_factory=RunInfo)
    config: ConfigSnapshot = field(default_factory=ConfigSnapshot)
    steps: list[StepRecord] = field(default_factory=list)
    host: list[HostSample] = field(default_factory=list)
    workers: list[WorkerStats] = field(default_factory=list)
    copies: list[CopyStat] = field(default_factory=list)
    syncs: list[SyncSite] = field(default_factory=list)
    cuda_calls: dict[str, int] = field(default_factory=dict)
    stacks: StackProfile = field(default_factory=StackProfile)
    probes: ProbeResults = field(default_factory=ProbeResults)
    spans: list[PhaseSpan] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Distributed runs only (stave.dist): launch identity and DDP counters of this rank.
    dist: DistInfo = field(default_factory=DistInfo)

    def counted_steps(self) -> list[StepRecord]:
        """Steps that enter the statistics (not warm-up, not profiled, not the FLOP-counting step)."""
        return [s for s in self.steps if s.counted]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict, tagged with the record schema."""
        return {"schema": RECORD_SCHEMA, **to_dict(self)}

    @classmethod
    def from_dict(cls, data: Any, where: str = "record") -> "RunRecord":
        """Rebuild a record, checking the schema tag and every field's type."""
        if not isinstance(data, dict) or data.get("schema") != RECORD_SCHEMA:
            raise FormatError(f"{where}: not a stave record (expected schema {RECORD_SCHEMA!r})")
        return from_dict(cls, data, where)

    @classmethod
    def load(cls, path: str | Path) -> "RunRecord":
        """Read a record file written by :meth:`to_dict` (JSON; never pickle)."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot read {p}: {exc.strerror or exc}") from exc
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise FormatError(f"{p}: not valid JSON at byte {exc.pos}: {exc.msg}") from exc
        return cls.from_dict(data, where=str(p))
