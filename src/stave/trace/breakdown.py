"""The additive per-step breakdown: each step's wall time split into parts that sum to it exactly.

GPU traces (the old TensorBoard profiler plugin's semantics, made exact). Each part is the time
covered by its kind of activity and by no kind of higher priority, in this order:

    1. kernel         compute kernels (every GPU kernel except communication), any stream, any device
    2. memcpy         GPU memory copies (HtoD, DtoH, DtoD, PtoP)
    3. memset         GPU memsets
    4. communication  communication kernels (NCCL/RCCL...) not hidden under the parts above
    5. runtime        CUDA/HIP runtime and driver calls on the host (launches, syncs, allocations)
    6. dataloader     host time inside ``enumerate(DataLoader)#...__next__``
    7. cpu_exec       host time inside PyTorch ops (``cpu_op`` events), any thread
    8. other          the rest of the step (Python between ops, time outside any recorded event)

So ``dataloader`` is data-loading time during which the GPU ran nothing: a data-loading bottleneck
shows here rather than hiding as CPU exec or other. The GPU parts of a step count only the GPU work
that step launched (:func:`stave.trace.steps.own_gpu`); what ran in its window on behalf of an
unprofiled iteration or after the loop is in no step's parts (it falls to the host parts or other).

CPU-only traces (no GPU activity) are split by what the training loop does instead:

    1. dataloader  ``enumerate(DataLoader)#...`` spans
    2. optimizer   ``Optimizer.step#...`` and ``Optimizer.zero_grad#...`` spans
    3. backward    ``autograd::engine::evaluate_function: ...`` spans (the autograd engine), any thread
    4. forward     the remaining op time of the training thread (model forward, loss, other tensor work)
    5. other       the rest (Python between ops, waits outside any op)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from stave.trace import intervals as iv
from stave.trace.kernels import COMMUNICATION, classify_kernel
from stave.trace.steps import OwnedGpu, StepWindows
from stave.trace.tables import CPU_OP, KERNEL, MEMCPY, MEMSET, RUNTIME, TraceData

GPU_PARTS: tuple[str, ...] = (
    "kernel",
    "memcpy",
    "memset",
    "communication",
    "runtime",
    "dataloader",
    "cpu_exec",
    "other",
)
CPU_PARTS: tuple[str, ...] = ("dataloader", "optimizer", "backward", "forward", "other")

DATALOADER_PREFIX = "enumerate(DataLoader)#"
OPTIMIZER_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")
BACKWARD_PREFIX = "autograd::engine::evaluate_function:"


@dataclass
class StepBreakdown:
    """Per-step parts in ns: ``values[i, j]`` is part ``parts[j]`` of step ``i``; rows sum to the step."""

    parts: tuple[str, ...]
    values: np.ndarray

    def mean_s(self) -> dict[str, float]:
        """Mean seconds per step of each part."""
        if len(self.values) == 0:
            return {p: 0.0 for p in self.parts}
        return {p: float(self.values[:, j].mean()) / 1e9 for j, p in enumerate(self.parts)}

    def shares(self) -> dict[str, float]:
        """Each part's share of the total step time (time-weighted; the shares sum to 1)."""
        total = float(self.values.sum())
        if total <= 0:
            return {p: 0.0 for p in self.parts}
        return {p: float(self.values[:, j].sum()) / total for j, p in enumerate(self.parts)}

    def part_ns(self, part: str) -> np.ndarray:
        """One part over the steps."""
        return self.values[:, self.parts.index(part)]


def additive(windows: StepWindows, sets: list[iv.Intervals]) -> np.ndarray:
    """Exclusive time of each set in each window, earlier sets first; a last column holds the rest."""
    out = np.zeros((len(windows), len(sets) + 1), dtype=np.int64)
    covered_prev = np.zeros(len(windows), dtype=np.int64)
    acc = iv.empty()
    for j, s in enumerate(sets):
        acc = iv.union(acc, s)
        covered = iv.measure_in(acc, windows.start, windows.end)
        out[:, j] = covered - covered_prev
        covered_prev = covered
    out[:, -1] = windows.duration - covered_prev
    return out


def host_spans(data: TraceData, mask: np.ndarray) -> iv.Intervals:
    """Merged host spans selected by ``mask``."""
    return iv.merge(data.host.start[mask], data.host.end[mask])


def name_mask(data: TraceData, names: np.ndarray, predicate: Callable[[str], bool]) -> np.ndarray:
    """Rows whose name satisfies ``predicate`` (evaluated once per distinct name)."""
    ids = data.name_ids_where(predicate)
    if len(ids) == 0:
        return np.zeros(len(names), dtype=bool)
    return np.isin(names, ids)


def kernel_groups(data: TraceData) -> np.ndarray:
    """Per GPU row: True where the row is a communication kernel."""
    gpu = data.gpu
    comm_ids = data.name_ids_where(lambda n: classify_kernel(n).group == COMMUNICATION)
    return (gpu.kind == KERNEL) & np.isin(gpu.name, comm_ids)


def gpu_breakdown(data: TraceData, windows: StepWindows, owned: OwnedGpu) -> StepBreakdown:
    """The GPU-trace breakdown (priority order in the module docstring), GPU work by owning step."""
    gpu, host = data.gpu, data.host
    comm = kernel_groups(data)
    compute = (gpu.kind == KERNEL) & ~comm
    dataloader = name_mask(data, host.name, lambda n: n.startswith(DATALOADER_PREFIX))
    start, end = owned.start, owned.end
    sets = [
        iv.merge(start[compute], end[compute]),
        iv.merge(start[gpu.kind == MEMCPY], end[gpu.kind == MEMCPY]),
        iv.merge(start[gpu.kind == MEMSET], end[gpu.kind == MEMSET]),
        iv.merge(start[comm], end[comm]),
        host_spans(data, host.cat == RUNTIME),
        host_spans(data, dataloader),
        host_spans(data, host.cat == CPU_OP),
    ]
    return StepBreakdown(GPU_PARTS, additive(windows, sets))


def cpu_breakdown(data: TraceData, windows: StepWindows) -> StepBreakdown:
    """The CPU-only breakdown (priority order in the module docstring)."""
    host = data.host
    dataloader = name_mask(data, host.name, lambda n: n.startswith(DATALOADER_PREFIX))
    optimizer = name_mask(data, host.name, lambda n: n.startswith(OPTIMIZER_PREFIXES))
    backward = name_mask(data, host.name, lambda n: n.startswith(BACKWARD_PREFIX))
    forward = (host.cat == CPU_OP) & (host.thread == windows.thread)
    sets = [
        host_spans(data, dataloader),
        host_spans(data, optimizer),
        host_spans(data, backward),
        host_spans(data, forward),
    ]
    return StepBreakdown(CPU_PARTS, additive(windows, sets))
