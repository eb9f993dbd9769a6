"""A doctor session: installs the hooks and the monitor, and turns what they saw into a RunRecord.

The session never runs an extra step and never draws from the user's random generators: it only
observes the user's own steps (FLOPs are counted on one of their warm-up steps) and runs its
probes after the script has ended.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import platform
import shutil
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

import psutil
import torch

from stave import __version__
from stave import device as dev
from stave.capture import config_probe, frameworks
from stave.capture.hooks_attention import AttentionHooks
from stave.capture.hooks_copies import CopyHooks
from stave.capture.hooks_loader import LoaderHooks
from stave.capture.hooks_loop import LoopHooks
from stave.capture.loader_stats import read_worker_files
from stave.capture.compile_stats import CompileStats, read_compile_stats
from stave.capture.op_counter import OpCounter
from stave.capture.steps import StepTracker
from stave.files import atomic_write_json
from stave.monitor.procfs import minor_faults
from stave.measure.config import ConfigSnapshot, TensorInfo, training_loader
from stave.measure.host import other_cores_readings, outside_job_cores
from stave.measure.record import RunInfo, RunRecord
from stave.measure.steps import step_time_s
from stave.measure.serialize import to_dict

log = logging.getLogger(__name__)

# Five steps cover the usual one-off costs (allocator warm-up, cuDNN autotuning, lazy modules,
# first-epoch worker start-up) without discarding much of a short run.
DEFAULT_WARMUP = 5
# The FLOP/op count runs on this warm-up step: step 0 pays one-off costs, and the step-cycle of
# several optimizers is only known once the first optimizer steps a second time.
FLOP_COUNT_STEP = 2
# Periodic records (distributed runs) re-convert only the newest steps, which late-resolved
# measurements (a collective wait, GPU events) may still amend; older ones are converted once.
RECENT_STEPS_REBUILT = 64
# Host samples in a periodic record: an hour at 10 Hz thinned ~9:1; the final record keeps all.
PERIODIC_HOST_SAMPLES = 4096
# The precision probe times the step's own GEMM shapes that hold this share of its matmul FLOPs,
# at most this many: the rest is a long tail whose rate follows the large ones, and each shape costs
# probe time.
# The post-run probes' time: at least PROBE_BUDGET_S, and PROBE_BUDGET_STEPS median steps where the
# step is long, since they re-time the step's own products (one call of each takes up to its share
# of a step, and every shape needs a few timed pairs in two dtypes), at most PROBE_BUDGET_MAX_S after
# any run.
PROBE_BUDGET_S = 2.0
PROBE_BUDGET_STEPS = 2.0
PROBE_BUDGET_MAX_S = 8.0
GEMM_FLOP_SHARE = 0.9
GEMM_SHAPES_MAX = 6


def batch_rows(batch: Sequence[TensorInfo]) -> set[int]:
    """The sizes a GEMM dimension has when it is the loader's (micro-)batch: its samples, and for
    token ids ([batch, seq], integer) or sequence features ([batch, seq, features]) its tokens,
    which sequence models flatten into the rows of their matrix products."""
    rows: set[int] = set()
    for t in batch:
        if not t.shape:
            continue
        rows.add(int(t.shape[0]))
        integer = t.dtype.startswith(("int", "uint"))
        if len(t.shape) >= 2 and ((integer and len(t.shape) == 2) or len(t.shape) == 3):
            rows.add(int(t.shape[0]) * int(t.shape[1]))
    return rows


class StopRun(BaseException):
    """Raised from the optimizer hook when ``--steps`` is reached.

    A BaseException, like KeyboardInterrupt, so the user's ``except Exception`` does not swallow it.
    """


@dataclass(frozen=True)
class DoctorOptions:
    """What the session measures and when it stops; validated on creation."""

    steps: int | None = None
    warmup: int | None = None
    profile_steps: int = 0
    count_flops: bool = True
    stacks: bool = True
    probes: bool = True
    record_path: str | None = None
    record_interval_s: float = 10.0
    host_interval_s: float = 0.1
    stack_interval_s: float = 0.02

    def __post_init__(self) -> None:
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.warmup is not None and self.warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {self.warmup}")
        if self.profile_steps < 0:
            raise ValueError(f"profile_steps must be >= 0, got {self.profile_steps}")
        if self.record_interval_s <= 0:
            raise ValueError("record_interval_s must be > 0")


class DoctorSession:
    """Measures the training loop that runs between :meth:`start` and :meth:`stop`."""

    def __init__(self, options: DoctorOptions, run: RunInfo | None = None,
                 on_step: Callable[[int, "DoctorSession"], None] | None = None,
                 attachments: Sequence[Any] = ()) -> None:
        self.options = options
        # Extra instruments (stave.dist.hooks.DistHooks): install(session) at start, uninstall() at
        # stop, contribute(record, final) on every record built (periodic ones included).
        self.attachments = list(attachments)
        self.run = run or RunInfo()
        self.on_step = on_step
        self.warmup = DEFAULT_WARMUP if options.warmup is None else options.warmup
        self.clock = dev.StepClock(dev.resolve_device(None))
        self.tracker = StepTracker(self.clock)
        self.config = ConfigSnapshot()
        self._stats_dir = tempfile.mkdtemp(prefix="stave-loader-")
        self.loop = LoopHooks(self.tracker, self._saw_optimizer, self._saw_model)
        self.loader = LoaderHooks(self.tracker, self._stats_dir, self._saw_batch)
        self.copies = CopyHooks(self.tracker)
        self.attention = AttentionHooks(self.tracker.main_thread_id)
        self.monitor: Any = None
        self._optimizers: dict[int, Any] = {}
        self._model_params: dict[int, int] = {}
        self._model: torch.nn.Module | None = None
        self._autocast_seen = False
        self._counter: OpCounter | None = None
        self._compile_at_warmup: CompileStats | None = None
        self._profile: Any = None
        self.profile_trace_path: str | None = None
        self._started = False
        self._stopped = False
        self._froze_gc = False  # start() froze the collector's objects; stop() thaws them
        self._record_thread: threading.Thread | None = None
        self._record_stop = threading.Event()
        self._step_dicts: list[dict[str, Any]] = []
        self.flop_step = FLOP_COUNT_STEP if options.count_flops and self.warmup > FLOP_COUNT_STEP else None

    # --- what the hooks report -------------------------------------------------------------------

    def _saw_optimizer(self, opt: Any) -> None:
        key = id(opt)
        if key not in self._optimizers:
            self._optimizers[key] = config_probe.optimizer_info(opt)
            if self.config.framework is None:
                # The stack at the hook: the framework's loop frames sit above the user's step.
                name, version, options = frameworks.detect(sys._getframe(), self.run.script)
                self.config.framework, self.config.framework_version = name, version
                self.config.framework_options = options
        self._optimizers[key].steps += 1

    def _saw_model(self, module: torch.nn.Module) -> None:
        key = id(module)
        if key not in self._model_params:
            params = sum(p.numel() for p in module.parameters())
            self._model_params[key] = params
            # The loss module is an outermost call too; the model is the one with most parameters.
            if self._model is None or params > self._model_params.get(id(self._model), -1):
                self._model = module
                config_probe.describe_model(module, self.config)
        if module is self._model and not self._autocast_seen and self.tracker.step_index >= 1:
            enabled, dtype = config_probe.autocast_state("cuda" if self.clock.use_events else "cpu")
            self.config.autocast_enabled = enabled
            self.config.autocast_dtype = dtype
            self._autocast_seen = True

    def _saw_batch(self, tensors: list[TensorInfo]) -> None:
        self.config.batch = tensors

    def _classify(self, index: int) -> tuple[bool, bool, bool]:
        warmup = index < self.warmup
        profiled = self.options.profile_steps > 0 and self.warmup <= index < self.warmup + self.options.profile_steps
        return warmup, profiled, index == self.flop_step

    def _step_end(self, index: int) -> None:
        if self.flop_step is not None:
            if index == self.flop_step - 1 and not self.config.compiled:
                # Not on compiled models: a dispatch mode around compiled code forces recompiles.
                self._counter = OpCounter(lambda: self.tracker.active or "other")
                self._counter.__enter__()
            elif index == self.flop_step and self._counter is not None:
                self._finish_counter()
        if index == self.warmup - 1 or (self.warmup == 0 and index == 0):
            config_probe.global_settings(self.config)
            self._compile_at_warmup = read_compile_stats()
            self._faults_at_warmup = (minor_faults(), index + 1)
        self._profile_step(index)
        if self.on_step is not None:
            self.on_step(index, self)
        if self.options.steps is not None and index + 1 >= self.options.steps:
            raise StopRun()

    def _note_compiles(self) -> None:
        """Frames compiled and compile seconds after warm-up (recompiles in the counted steps)."""
        end = read_compile_stats()
        if end is None:
            return
        start = self._compile_at_warmup
        self.config.compile_frames = end.frames
        self.config.compile_frames_counted = end.frames - (start.frames if start else 0)
        self.config.compile_s_counted = max(0.0, end.compile_s - (start.compile_s if start else 0.0))
        self.config.recompile_reasons = end.reasons

    def _note_faults(self) -> None:
        """Minor page faults per step after warm-up: whether the steps touch fresh pages each time."""
        start, first = getattr(self, "_faults_at_warmup", (None, 0))
        end = minor_faults()
        steps = self.tracker.step_index - first
        if start is not None and end is not None and steps > 0:
            self.config.minor_faults_per_step = (end - start) / steps

    def _finish_counter(self) -> None:
        counter, self._counter = self._counter, None
        if counter is None:
            return
        counter.__exit__(None, None, None)
        work = {k: v for k, v in counter.ops.items() if k != "data_wait"}
        self.config.aten_ops_per_step = sum(work.values())
        self.config.aten_ops_by_phase = dict(counter.ops)
        self.config.flops_by_phase = dict(counter.flops)
        self.config.flops_per_step = sum(v for k, v in counter.flops.items() if k != "data_wait")
        self.config.attention_flops_by_phase = dict(counter.attention_flops)
        self.config.attention_op_s_by_phase = {k: v / 1e9 for k, v in counter.attention_ns.items()}
        self.config.sdpa_kernels = dict(counter.sdpa_kernels)
        self.config.gemm_shapes = counter.top_gemms(GEMM_FLOP_SHARE, GEMM_SHAPES_MAX)
        self.config.matmul_shapes = counter.top_gemms(GEMM_FLOP_SHARE, GEMM_SHAPES_MAX, convolutions=False)
        self.config.conv_shapes = counter.top_convs(GEMM_FLOP_SHARE, GEMM_SHAPES_MAX)
        self.config.gemm_dtype = counter.gemm_dtype()
        self.config.op_s_by_phase = counter.op_s_by_phase()
        self.config.serial_op_s_by_phase = {k: v / 1e9 for k, v in counter.serial_ns.items()}
        self.config.serial_ops_by_phase = dict(counter.serial_ops)
        self.config.large_ops_by_phase = dict(counter.large_ops)

    def _profile_step(self, index: int) -> None:
        n = self.options.profile_steps
        if n <= 0:
            return
        if index == self.warmup - 1 and self._profile is None:
            from stave.capture.profile_window import ProfileWindow

            # Its own directory: the stats directory is removed at stop(), before the caller reads
            # the trace, and the user keeps the raw trace to open in Perfetto or `stave trace`.
            out_dir = tempfile.mkdtemp(prefix="stave-profile-")
            self._profile = ProfileWindow(out_dir, n)
            self._profile.start()
        elif self._profile is not None:
            self._profile.step()
            if index >= self.warmup + n - 1:
                self._stop_profile()

    def _stop_profile(self) -> None:
        window, self._profile = self._profile, None
        if window is not None:
            path = window.stop()
            self.profile_trace_path = str(path) if path else None

    # --- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Install hooks, start the monitor (and the periodic record writer, if asked)."""
        from stave.monitor.sampler import Monitor

        if self._started:
            return
        self._started = True
        self.tracker.classify = self._classify
        self.tracker.on_step_end = self._step_end
        self.run.started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self._t0 = time.perf_counter_ns()
        self.loop.install()
        self.loader.install()
        self.copies.install()
        self.attention.install()
        for attachment in self.attachments:
            attachment.install(self)
        self.monitor = Monitor(
            position=self.tracker.position,
            worker_pids=self.loader.worker_pids,
            main_thread_id=self.tracker.main_thread_id,
            device=dev.resolve_device(None),
            host_interval_s=self.options.host_interval_s,
            stack_interval_s=self.options.stack_interval_s,
            stacks=self.options.stacks,
            # A rank of a multi-process run: its launcher's other children are the job's other ranks.
            job_root_pid=os.getppid() if self.run.world_size > 1 else None,
        )
        self.monitor.start()
        if self.options.record_path:
            self._record_thread = threading.Thread(target=self._record_loop, name="stave-record", daemon=True)
            self._record_thread.start()
        # The doctor's start-up (its imports, torch's, the hooks) leaves the collector further along
        # than the script alone would: a forked loader worker then ran a full collection over the
        # ~370,000 objects it inherited at its first allocations (0.20-0.26 s a worker on a 2-core
        # EPYC; gc.get_count()[2] 10 at fork against 1 plainly), which DATA_WORKER_STARTUP priced as
        # the job's. Frozen, those objects are left out of every later collection, here and in the
        # workers (what CPython's docs advise before forking); the script's own objects are not.
        # A script or framework that froze objects itself keeps them frozen: thawed only if it had not.
        self._froze_gc = gc.get_freeze_count() == 0
        gc.collect()
        gc.freeze()

    def stop(self) -> RunRecord:
        """Remove every hook, stop workers and threads, and return the record (idempotent)."""
        if self._stopped:
            return self._record
        self._stopped = True
        if self._froze_gc:
            # What the process does after the doctor (a notebook, a test session) collects as before.
            gc.unfreeze()
            self._froze_gc = False
        if self._counter is not None:
            self._counter.__exit__(None, None, None)
            self._counter = None
        self._stop_profile()
        self.copies.uninstall()
        self.attention.uninstall()
        self.config.sdpa_calls = self.attention.calls
        self.config.sdpa_inputs = dict(self.attention.first_inputs)
        self.loop.uninstall()
        if self.loop.pad_evidence is not None:
            self.config.pad_token_id = self.loop.pad_evidence.pad_id
            self.config.pad_token_source = self.loop.pad_evidence.source
        for attachment in self.attachments:
            attachment.uninstall()
        self.loader.shutdown_workers()
        main_stats = self.loader.main_process_stats()
        self.loader.uninstall()
        self._record_stop.set()
        if self._record_thread is not None:
            self._record_thread.join(timeout=30)
        if self.monitor is not None:
            self.monitor.stop()
            self.run.monitor_cpu_s = self.monitor.self_cpu_s
        # Resolving the last steps' GPU events needs them complete; the user's loop is over, so
        # this synchronization costs them nothing.
        dev.synchronize()
        self.tracker.finish()
        self._note_compiles()
        self._note_faults()
        if self.config.torch_threads is None:
            config_probe.global_settings(self.config)
        self._record = self._build_record(main_stats)
        self._model = None
        if self.options.probes and self._record.steps:
            self._record.probes = self._run_probes()
        if self.options.record_path:
            self.write_record(self.options.record_path)
        shutil.rmtree(self._stats_dir, ignore_errors=True)
        return self._record

    def _run_probes(self) -> Any:
        from stave.monitor.probes import free_cores, run_probes

        from stave.monitor.optimizer_probe import optimizer_probe, probe_sizes

        threads = self.config.torch_threads or torch.get_num_threads()
        device = dev.resolve_device(None)
        step_s = step_time_s(s.duration_ns / 1e9 for s in self._record.steps if s.duration_ns > 0)
        budget_s = min(PROBE_BUDGET_MAX_S, max(PROBE_BUDGET_S, PROBE_BUDGET_STEPS * step_s))
        # The wake probe sleeps as long as the run's typical wait for data (an evaluation's wait is
        # not the training loop's).
        waits = sorted(s.data_wait_ns / 1e9 for s in self._record.counted_steps() if s.eval_ns == 0)
        data_wait_s = waits[len(waits) // 2] if waits else None
        outside_cores = self._outside_cores()
        # The mean size of the copies to the GPU from pageable memory: what the pinned probe copies.
        pageable = [c for c in self.copies.copies.values() if c.direction == "h2d" and not c.pinned and c.count]
        pageable_bytes = (sum(c.nbytes for c in pageable) // sum(c.count for c in pageable)) if pageable else None
        probes = run_probes(threads, device, budget_s=budget_s, gemm_shapes=self.config.gemm_shapes,
                            batch_rows=batch_rows(self.config.batch), matmul_shapes=self.config.matmul_shapes,
                            conv_shapes=self.config.conv_shapes, gemm_dtype=self.config.gemm_dtype,
                            data_wait_s=data_wait_s, outside_cores=outside_cores,
                            pageable_copy_bytes=pageable_bytes)
        # The optimizer with most parameters: the one whose step the finding would change.
        optimizers = sorted(self.config.optimizers, key=lambda o: -o.params)
        if optimizers:
            opt = optimizers[0]
            # Beside other busy processes, at the cores they left free (monitor/optimizer_probe.py:
            # the loop's barrier waits on a lost core are their cost, not the optimizer's).
            free = free_cores(dev.usable_cores(), outside_cores)
            probe_threads = free if not dev.is_cuda(device) and free < threads else None
            ratios, own_step_s = optimizer_probe(opt, device, threads=probe_threads)
            probes.optimizer_fused_ratio = ratios.get("fused")
            probes.optimizer_foreach_ratio = ratios.get("foreach")
            if ratios:
                probes.optimizer_probe_threads = probe_threads or threads
                probes.optimizer_own_step_s = own_step_s
                sizes = probe_sizes(opt)
                probes.optimizer_probe = [len(sizes), sum(sizes)]
        self._probe_attention(probes, device)
        self._probe_shared_memory(probes)
        return probes

    def _outside_cores(self) -> float | None:
        """Cores other processes held on the job's cores during its counted steps (the probes run
        beside them too: where they left fewer cores than the pool's threads, the probes time that)."""
        counted = {s.index for s in self._record.counted_steps()}
        samples = other_cores_readings(self._record.host, counted)
        total = self._record.run.cores_total or self._record.config.cores_total or dev.usable_cores()
        return outside_job_cores(samples, total, dev.usable_cores(), among=self._record.host)

    def _probe_shared_memory(self, probes: Any) -> None:
        """What a batch costs to come through a worker's shared memory: after main-process loading,
        what moving the loading into workers would add; after a worker run, what its float64
        batches cost the trainer (the first touch of their pages, BATCH_DTYPE) and what a worker
        keeps paying once its per-sample fetch goes (the shipping of each batch, DATA_CPU_BOUND's
        whole-batch fetch). Workers already paid the delivery in the run, so only the delivery
        probe runs after one."""
        from stave.monitor.shm_probe import shm_collate_s_per_byte

        loader = training_loader(self.config.loaders)
        batch_bytes = sum(t.nbytes for t in self.config.batch)
        if loader is None or batch_bytes <= 0:
            return
        if loader.num_workers == 0:
            probes.shm_collate_s_per_byte = shm_collate_s_per_byte(batch_bytes)
            probes.shm_probe_bytes = batch_bytes
        self._probe_delivery(probes, loader)

    def _probe_delivery(self, probes: Any, loader: Any) -> None:
        """A batch of the run's shapes from a worker, both sides (monitor/delivery_probe.py)."""
        from stave.monitor.delivery_probe import probe_delivery

        # The batch as it was delivered: its first dimension is the samples (also for a dataset
        # that returns whole batches itself).
        batch_size = self.config.batch[0].shape[0] if self.config.batch and self.config.batch[0].shape else 0
        shapes = []
        for t in self.config.batch:
            dtype = getattr(torch, t.dtype.removeprefix("torch."), None)
            if not isinstance(dtype, torch.dtype) or not t.shape:
                return  # a tensor the probe cannot rebuild: no guess
            shapes.append((list(t.shape[1:]), dtype))
        if not shapes or not batch_size:
            return
        times = probe_delivery(shapes, int(batch_size))
        if times is not None:
            probes.delivery_main_s = times.main_s
            probes.delivery_worker_s = times.worker_s
            probes.delivery_receive_s = times.receive_s
            probes.delivery_touch_s = times.touch_s

    def _probe_attention(self, probes: Any, device: Any) -> None:
        """Eager against SDPA attention at the run's shape, when its HF model ran eager attention."""
        from stave.monitor.attention_probe import blended, fresh_share, probe_attention

        cfg = self.config
        counted = self._record.counted_steps()
        if cfg.attn_implementation != "eager" or len(cfg.attention_geometry) != 4 or not counted:
            return
        rows = sum(s.samples for s in counted)
        tokens = sum(s.tokens for s in counted)
        forwards = sum(s.forward_calls for s in counted)
        if not (rows and tokens and forwards):
            return
        layers, heads, head_dim, causal = cfg.attention_geometry
        batch, seq = max(1, round(rows / forwards)), max(1, round(tokens / rows))
        # Under autocast attention runs in the autocast dtype; otherwise in the parameters' (fp32).
        dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(cfg.autocast_dtype or "", torch.float32)
        # transformers builds the eager causal mask in the embeddings' dtype: the parameters' float32
        # under autocast (a model cast to bf16 has bf16 parameters and a bf16 mask).
        mask_dtype = torch.float32 if cfg.autocast_dtype else dtype
        times = probe_attention(batch, heads, seq, head_dim, bool(causal), dtype, device, mask_dtype=mask_dtype)
        if times is not None and cfg.minor_faults_per_step and not dev.is_cuda(dev.resolve_device(device)):
            # The run's steps faulted pages in: time each call on fresh pages too, and take the share
            # of that cost the run's own fault count allows (monitor/procfs.minor_faults).
            fresh = probe_attention(batch, heads, seq, head_dim, bool(causal), dtype, device, mask_dtype=mask_dtype,
                                    fresh_pages=True)
            if fresh is not None:
                calls = layers * forwards / len(counted)
                share = fresh_share(times, fresh, cfg.minor_faults_per_step, calls)
                probes.attention_fresh_share = share
                times = blended(times, fresh, share)
        if times is not None:
            probes.attention_eager_s = times.eager_s * times.batch_scale
            probes.attention_sdpa_s = times.sdpa_s * times.batch_scale
            probes.attention_probe = [batch, heads, seq, head_dim]

    # --- the record ----------------------------------------------------------------------------------

    def _build_record(self, main_stats: Any) -> RunRecord:
        run = self.run
        run.wall_ns = time.perf_counter_ns() - self._t0
        run.stave_version = __version__
        run.torch_version = torch.__version__
        run.python_version = platform.python_version()
        run.platform = platform.platform()
        run.hostname = socket.gethostname()
        run.pid = os.getpid()
        run.cpu_model = dev.cpu_model_name()
        run.cores_usable = dev.usable_cores()
        run.cores_total = os.cpu_count()
        run.ram_total_bytes = psutil.virtual_memory().total
        run.requested_steps = self.options.steps
        run.profile_steps = self.options.profile_steps
        steps = list(self.tracker.steps)
        if self.options.warmup is None and len(steps) < 2 * DEFAULT_WARMUP:
            # A short run: keep at least three quarters of its steps in the statistics.
            self.warmup = min(self.warmup, max(1, len(steps) // 4))
            for s in steps:
                s.warmup = s.index < self.warmup
        run.warmup_steps = self.warmup
        info = dev.describe_device(None)
        cfg = self.config
        cfg.device_type, cfg.device_name = info.type, info.name
        cfg.device_capability = list(info.compute_capability) if info.compute_capability else None
        cfg.device_total_memory_bytes = info.total_memory_bytes
        cfg.bf16_native = info.bf16_native
        cfg.optimizers = list(self._optimizers.values())
        cfg.loaders = list(self.loader.loaders.values())
        for loader in cfg.loaders:
            loader.dataset_bytes_on_disk, loader.dataset_files = config_probe.dataset_size_on_disk(loader.dataset_paths)
        counted = [s for s in steps if s.counted]
        if counted:
            cfg.forward_calls_per_step = sum(s.forward_calls for s in counted) / len(counted)
        workers = read_worker_files(self._stats_dir)
        if main_stats is not None and main_stats.samples:
            workers.insert(0, main_stats.to_worker_stats())
        record = RunRecord(
            run=run,
            config=cfg,
            steps=steps,
            host=self.monitor.host_samples() if self.monitor else [],
            workers=workers,
            copies=list(self.copies.copies.values()),
            syncs=list(self.copies.syncs.values()),
            cuda_calls=dict(self.copies.cuda_calls),
            stacks=self.monitor.stack_profile() if self.monitor else None,
            spans=list(self.tracker.timeline),
        )
        if record.stacks is None:
            from stave.measure.stacks import StackProfile

            record.stacks = StackProfile()
        monitor_error = getattr(self.monitor, "error", None)
        if monitor_error:
            record.notes.append(f"the machine monitor stopped early: {monitor_error}")
        if not steps:
            record.notes.append(
                "no optimizer.step() was seen: stave measures steps at optimizer.step() (or, for an update "
                "written by hand, at the zero_grad() after each backward); a script that calls neither "
                "(inference, gradients cleared by hand) has no steps to analyze"
            )
        elif self.tracker.manual_steps and not self.tracker.optimizer_seen:
            record.notes.append(
                "no optimizer.step() was seen: steps were counted at the zero_grad() that follows each "
                "backward (parameters updated by hand)"
            )
        for attachment in self.attachments:
            attachment.contribute(record, final=True)
        return record

    def partial_record(self) -> RunRecord:
        """What has been measured so far (for the periodic write while the script runs)."""
        run = dataclasses.replace(self.run, stopped_by="running")
        record = RunRecord(
            run=run,
            config=self.config,
            steps=list(self.tracker.steps),
            host=self.monitor.host_samples() if self.monitor else [],
        )
        for attachment in self.attachments:
            attachment.contribute(record, final=False)
        return record

    def partial_record_dict(self) -> dict[str, Any]:
        """:meth:`partial_record` as JSON-ready data, built incrementally.

        A periodic write must stay cheap however long the run: steps are converted once (all but
        the most recent :data:`RECENT_STEPS_REBUILT`, which attachments may still amend, e.g.
        with a collective wait resolved a few steps late), and host samples are thinned to at most
        :data:`PERIODIC_HOST_SAMPLES` (the final record keeps them all).
        """
        record = self.partial_record()
        steps, host = record.steps, record.host
        record.steps, record.host = [], []
        data = record.to_dict()
        stable = max(0, len(steps) - RECENT_STEPS_REBUILT)
        if len(self._step_dicts) > stable:
            del self._step_dicts[stable:]
        self._step_dicts.extend(to_dict(s) for s in steps[len(self._step_dicts):stable])
        data["steps"] = self._step_dicts + [to_dict(s) for s in steps[stable:]]
        stride = max(1, -(-len(host) // PERIODIC_HOST_SAMPLES))
        data["host"] = [to_dict(h) for h in host[::stride]]
        return data

    def write_record(self, path: str) -> None:
        """Write the final record (JSON) atomically."""
        atomic_write_json(path, self._record.to_dict(), indent=None)

    def _record_loop(self) -> None:
        path = self.options.record_path
        assert path is not None
        # The first write is immediate, so a rank that dies early still leaves who and where it was.
        while True:
            try:
                atomic_write_json(path, self.partial_record_dict(), indent=None)
            except (OSError, ValueError) as exc:
                log.warning("could not write the periodic record to %s: %s", path, exc)
            except RuntimeError as exc:
                # The main thread changed a dict while it was being copied: try again next time.
                log.debug("periodic record skipped: %s", exc)
            if self._record_stop.wait(self.options.record_interval_s):
                return

