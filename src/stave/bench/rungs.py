"""The rungs of the optimization ladder, in the order they are climbed.

A rung looks at the job, the machine and the configuration kept so far and returns a
:class:`Plan`: the candidate changes to time and how to search them, or the reason it does not
apply here. Rungs never time anything themselves; :mod:`stave.bench.ladder` runs the plans.

Rungs beyond these are added one file each in :mod:`stave.bench.added_rungs`: the file declares
the setting the rung changes and registers the rung's plan with :func:`rung` (as rules register with
:func:`stave.diagnose.engine.rule`).

Search modes: ``single`` (one candidate), ``best`` (each candidate against the current
configuration, the fastest significant one wins), ``grow`` (candidates in order, each against
the best so far, stopping after two that do not help in a row, ``GROW_PATIENCE`` in
:mod:`stave.bench.ladder`, or at the first that fails: worker counts, batch sizes) and
``largest_fit`` (GPU batch size: the largest candidate that does not run out of memory).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from stave import device as dev
from stave.bench import added_rungs
from stave.bench.pipeline import device_loader_class
from stave.bench.settings import TORCH_LOADER, RunConfig
from stave.bench.spec import JobSpec
from stave.train.optim import supported_impls
from stave.train.precision import best_precision

# Largest batch the batch-size rung tries: beyond this, step time dominates any per-step saving
# on every device we know, and the learning-rate schedule would need re-tuning anyway.
MAX_BATCH_SIZE = 4096
# The batch may not exceed this share of the dataset: an epoch of fewer than four steps is no
# longer a training loop the throughput of which means anything.
MAX_BATCH_SHARE_OF_DATASET = 0.25
# --quick caps the batch at this multiple of the job's own, to keep test runs to seconds.
QUICK_BATCH_FACTOR = 4
# Worker counts beyond this are not tried: past it, loaders are bound by shared memory hand-off.
MAX_WORKERS = 16
# The input-pipeline rungs are retried at the end of the ladder when the kept configuration waits
# for data at least this share of its step: the compute rungs shrink the step, so a pipeline that
# kept up with the baseline may no longer keep up. Below it, removing the whole wait would gain at
# most ~1.05x, close to the keep bar (1.02) and the noise of a window.
INPUT_RETRY_WAIT_SHARE = 0.05


@dataclass
class Context:
    """What rungs may look at: the job, the machine, options and the rungs climbed so far."""

    spec: JobSpec
    device: torch.device
    quick: bool
    image_inputs: bool
    batch_cap: Callable[[RunConfig], int]
    results: dict[str, Any] = field(default_factory=dict)
    _probe: torch.optim.Optimizer | None = None

    def probe_optimizer(self) -> torch.optim.Optimizer:
        """The job's optimizer built on a fresh model on the CPU, to ask which implementations it has."""
        if self._probe is None:
            self._probe = self.spec.optimizer(self.spec.model())
        return self._probe


@dataclass(frozen=True)
class Plan:
    """Candidates to time (label, changes) and how to search them, or why the rung is skipped."""

    mode: str = "single"
    candidates: tuple[tuple[str, dict[str, Any]], ...] = ()
    skip: str | None = None

    @staticmethod
    def skipped(reason: str) -> "Plan":
        """A rung that does not apply here, and why."""
        return Plan(skip=reason)


@dataclass(frozen=True)
class Rung:
    """A named step of the ladder. ``pairs_with``: earlier rungs that, when reverted only for
    speed, are retried together with this one (bf16 convolutions pay on a CPU only in NHWC)."""

    name: str
    title: str
    plan: Callable[[Context, RunConfig], Plan]
    pairs_with: tuple[str, ...] = ()


PlanFn = Callable[[Context, RunConfig], Plan]

# Rungs registered with @rung: name -> (rung, the rung it goes before).
_ADDED: dict[str, tuple[Rung, str]] = {}
# Where an added rung goes unless it says otherwise: with the compute rungs, before the pipeline's retry.
DEFAULT_BEFORE = "input_again"


def rung(name: str, title: str, *, before: str = DEFAULT_BEFORE,
         pairs_with: tuple[str, ...] = ()) -> Callable[[PlanFn], PlanFn]:
    """Register the decorated plan function as a rung of the default ladder, placed before ``before``."""

    def register(plan: PlanFn) -> PlanFn:
        if name in _ADDED:
            raise ValueError(f"a rung named {name!r} is registered already")
        _ADDED[name] = (Rung(name, title, plan, pairs_with), before)
        return plan

    return register


def added_rungs_in_place(rungs: list[Rung]) -> list[Rung]:
    """``rungs`` with every registered rung inserted before its anchor (at the end if it is absent)."""
    added_rungs.load_all()
    out = list(rungs)
    for name, (added, before) in _ADDED.items():
        if any(r.name == name for r in out):
            raise ValueError(f"the added rung {name!r} has the name of a built-in rung")
        names = [r.name for r in out]
        out.insert(names.index(before) if before in names else len(out), added)
    return out


def _powers_of_two_above(start: int, limit: int) -> list[int]:
    out, value = [], max(1, start * 2) if start else 1
    while value <= limit:
        out.append(value)
        value *= 2
    return out


def plan_workers(ctx: Context, current: RunConfig) -> Plan:
    """DataLoader worker processes, counted up from the job's own until two counts in a row do not help."""
    if current.loader != TORCH_LOADER:
        return Plan.skipped(f"the {current.loader} loader chooses its own workers")
    counts = _worker_counts(current)
    if not counts:
        limit = min(dev.usable_cores(), MAX_WORKERS)
        return Plan.skipped(f"the job already uses {current.num_workers} workers on {limit} usable cores")
    return Plan("grow", tuple((f"{n} worker{'s' if n > 1 else ''}", {"num_workers": n}) for n in counts))


def _worker_counts(current: RunConfig) -> list[int]:
    """Worker counts above the current one, doubling, up to the usable cores."""
    return _powers_of_two_above(current.num_workers, min(dev.usable_cores(), MAX_WORKERS))


def _loader_changes(name: str) -> dict[str, Any]:
    """The changes that swap in the custom loader ``name`` (it does its own transfer and pinning)."""
    return {"loader": name, "uint8": False, "pin_memory": False}


def plan_pin_memory(ctx: Context, current: RunConfig) -> Plan:
    """Pinned host batches and non_blocking copies (GPU)."""
    if not dev.is_cuda(ctx.device):
        return Plan.skipped("no GPU (pinning only speeds host-to-GPU copies)")
    if current.loader != TORCH_LOADER:
        return Plan.skipped(f"the {current.loader} loader pins its own buffers")
    if device_loader_class() is None:
        return Plan.skipped("stave.data.DeviceLoader is not available")
    return Plan("single", (("pin_memory + non_blocking", {"pin_memory": True}),))


def plan_batch_size(ctx: Context, current: RunConfig) -> Plan:
    """Larger batches: doubling up to the memory cap (GPU: the largest that fits)."""
    cap = min(ctx.batch_cap(current), MAX_BATCH_SIZE, int(len(ctx.spec.dataset) * MAX_BATCH_SHARE_OF_DATASET))  # type: ignore[arg-type]
    if ctx.quick:
        cap = min(cap, ctx.spec.batch_size * QUICK_BATCH_FACTOR)
    sizes = _powers_of_two_above(current.batch_size, cap)
    if not sizes:
        return Plan.skipped(f"batch {current.batch_size} is already at the cap ({cap})")
    mode = "largest_fit" if dev.is_cuda(ctx.device) else "grow"
    return Plan(mode, tuple((f"batch {b}", {"batch_size": b}) for b in sizes))


def plan_uint8(ctx: Context, current: RunConfig) -> Plan:
    """Images as uint8 to the device, converted and normalized there."""
    if current.loader != TORCH_LOADER:
        return Plan.skipped(f"the {current.loader} loader decides its own transfer format")
    if ctx.spec.uint8_dataset is None:
        return Plan.skipped("no uint8 variant of the dataset (JobSpec.uint8_dataset)")
    if device_loader_class() is None:
        return Plan.skipped("stave.data.DeviceLoader is not available")
    return Plan("single", (("uint8 + normalize on device", {"uint8": True}),))


def custom_loader_rung(name: str, description: str) -> Rung:
    """A rung that swaps the input pipeline for the job's custom loader ``name``."""

    def plan(ctx: Context, current: RunConfig) -> Plan:
        return Plan("single", ((f"loader: {name}", _loader_changes(name)),))

    return Rung(f"loader:{name}", description or f"input pipeline: {name}", plan)


def plan_input_again(ctx: Context, current: RunConfig) -> Plan:
    """The input pipeline again (more workers, the job's custom loaders) once compute got faster."""
    wait = _current_wait_share(ctx, current)
    if wait is None:
        return Plan.skipped("no rung was kept: the pipeline was judged on this configuration")
    if wait < INPUT_RETRY_WAIT_SHARE:
        return Plan.skipped(f"data wait is {wait:.0%} of the step, under {INPUT_RETRY_WAIT_SHARE:.0%}")
    loaders = [(f"loader: {c.name}", _loader_changes(c.name)) for c in ctx.spec.loaders if c.name != current.loader]
    counts = _worker_counts(current) if current.loader == TORCH_LOADER else []
    workers = [(f"{n} worker{'s' if n > 1 else ''}", {"num_workers": n}) for n in counts]
    if workers and not loaders:
        # More workers are the only lever left: climb them in a grow search, as the workers rung
        # does (an H100 ladder kept 4 of its 16 cores' workers here, one doubling at a time,
        # and still waited for data 75% of its step).
        return Plan("grow", tuple(workers))
    candidates = workers[:1] + loaders
    if not candidates:
        return Plan.skipped(f"data wait is {wait:.0%}, but no other input pipeline is left to try")
    return Plan("best", tuple(candidates))


def _current_wait_share(ctx: Context, current: RunConfig) -> float | None:
    """The data-wait share measured for ``current`` by the latest rung that kept it, or None when no
    rung kept anything (then the workers rung judged the pipeline on this very configuration).

    Input rungs count too: the workers rung runs at the job's batch size, and a batch-size rung after
    it multiplies the work per step (an H100 ladder kept 1 worker at batch 32, then batch 1024, and
    ended waiting for data 93% of its step)."""
    latest = None
    for result in ctx.results.values():
        if result.chosen is not None and result.chosen.config == current:
            latest = result.chosen.data_wait_share
    return latest


def plan_set_to_none(ctx: Context, current: RunConfig) -> Plan:
    """zero_grad(set_to_none=True), when the job passes False."""
    if current.train.set_to_none:
        return Plan.skipped("already set_to_none=True (the default since torch 2.0)")
    return Plan("single", (("zero_grad(set_to_none=True)", {"set_to_none": True}),))


def plan_autocast(ctx: Context, current: RunConfig) -> Plan:
    """Autocast to the device's native reduced precision."""
    precision, why = best_precision(ctx.device)
    if precision is None:
        return Plan.skipped(why)
    if current.train.precision == precision:
        return Plan.skipped(f"the job already runs {precision} autocast")
    return Plan("single", ((f"autocast {precision}", {"precision": precision}),))


def plan_channels_last(ctx: Context, current: RunConfig) -> Plan:
    """NHWC weights and batches for conv nets."""
    if not ctx.image_inputs:
        return Plan.skipped("the model has no 2-D convolutions")
    if current.train.channels_last:
        return Plan.skipped("already channels_last")
    return Plan("single", (("channels_last", {"channels_last": True}),))


def plan_optimizer(ctx: Context, current: RunConfig) -> Plan:
    """foreach / fused optimizer implementations, when the optimizer class has them."""
    probe = ctx.probe_optimizer()
    impls = [i for i in supported_impls(probe) if i != "default" and i != current.train.optimizer_impl]
    if not impls:
        return Plan.skipped(f"{type(probe).__name__} has no foreach or fused implementation")
    return Plan("best", tuple((f"{type(probe).__name__}({i}=True)", {"optimizer_impl": i}) for i in impls))


def plan_compile(ctx: Context, current: RunConfig) -> Plan:
    """torch.compile of the model (compile time is reported apart)."""
    if ctx.quick:
        return Plan.skipped("--quick (inductor takes minutes on a few cores)")
    if current.train.compile:
        return Plan.skipped("already compiled")
    return Plan("single", (("torch.compile", {"compile": True}),))


def plan_cuda_graphs(ctx: Context, current: RunConfig) -> Plan:
    """CUDA graphs: replay the step's kernels without per-kernel launch cost (GPU)."""
    if not dev.is_cuda(ctx.device):
        return Plan.skipped("no GPU (graphs remove GPU launch overhead)")
    return Plan("single", (("CUDA graphs", {"cuda_graphs": True}),))


def plan_cudnn_benchmark(ctx: Context, current: RunConfig) -> Plan:
    """cudnn.benchmark: time convolution algorithms once per shape (GPU, conv nets)."""
    if not dev.is_cuda(ctx.device):
        return Plan.skipped("no GPU (cuDNN is GPU-only)")
    if not ctx.image_inputs:
        return Plan.skipped("the model has no 2-D convolutions")
    return Plan("single", (("cudnn.benchmark", {"cudnn_benchmark": True}),))


def default_rungs(spec: JobSpec) -> list[Rung]:
    """The ladder of issue 5, with the job's custom loaders after the uint8 rung."""
    rungs = [
        Rung("workers", "DataLoader workers", plan_workers),
        Rung("pin_memory", "pin_memory + non_blocking", plan_pin_memory),
        Rung("batch_size", "batch size", plan_batch_size),
        Rung("uint8", "uint8 + normalize on device", plan_uint8),
    ]
    rungs += [custom_loader_rung(c.name, c.description) for c in spec.loaders]
    rungs += [
        Rung("set_to_none", "zero_grad(set_to_none=True)", plan_set_to_none),
        Rung("autocast", "autocast", plan_autocast),
        Rung("channels_last", "channels_last", plan_channels_last, pairs_with=("autocast",)),
        Rung("batch_size_again", "batch size again", plan_batch_size),
        Rung("optimizer", "optimizer foreach/fused", plan_optimizer),
        Rung("compile", "torch.compile", plan_compile),
        Rung("cuda_graphs", "CUDA graphs", plan_cuda_graphs),
        Rung("cudnn_benchmark", "cudnn.benchmark", plan_cudnn_benchmark),
        # Last: every compute rung above shrinks the step (CUDA graphs by 1.3x in a --quick seed
        # ladder on an H100), so only now does the pipeline face the final step time.
        Rung("input_again", "input pipeline again", plan_input_again),
    ]
    return added_rungs_in_place(rungs)
