"""Model FLOPs utilization: FLOPs a step does / (step time x the device's peak FLOP/s).

FLOPs come from ``torch.utils.flop_counter.FlopCounterMode`` over one forward and backward (the
optimizer update is not counted, by the usual MFU convention). The peak is measured on a CPU (a
large matmul in the step's compute dtype, best of a few runs, on all threads torch uses) and read
from :data:`stave.device.KNOWN_GPU_PEAK_FLOPS` on a GPU (dense bf16/fp16 tensor-core peak).
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from stave import device as dev
from stave.train.step import autocast_context

log = logging.getLogger(__name__)

# Matmul side for the CPU peak probe: large enough to be compute-bound (operands far exceed the
# L2 cache), small enough to run in well under a second on two cores.
PEAK_MATMUL_N = 2048
# Timed repetitions of the probe; the best one is the peak (slower ones met interference).
PEAK_REPEATS = 5


@dataclass(frozen=True)
class Peak:
    """A device's peak FLOP/s for one dtype and where the number came from."""

    flops_per_s: float | None
    dtype: str
    source: str


# Name fragments of aten ops that do dense matmul work inside one kernel (recurrent layers: oneDNN's
# mkldnn_rnn_layer on CPU, cuDNN's _cudnn_rnn, the fused cells; integer matmuls). When one of them
# runs and the counter has no formula for it, the FLOP total misses that work: MFU would be far too
# low, so it is reported as unknown instead.
DENSE_OP_FRAGMENTS = ("rnn", "lstm", "gru", "_int_mm", "int4pack_mm", "int8pack_mm")


class _OpNames(TorchDispatchMode):
    """Collects the aten op packets a region runs (nested inside the FLOP counter)."""

    def __init__(self) -> None:
        super().__init__()
        self.packets: set[Any] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.packets.add(func.overloadpacket)
        return func(*args, **(kwargs or {}))


@dataclass(frozen=True)
class StepFlops:
    """FLOPs of one forward + backward, and the dense ops they leave out (``uncounted_ops``)."""

    flops: int
    uncounted_ops: tuple[str, ...] = ()


def uncounted_dense_ops(packets: Any, registry: Any) -> tuple[str, ...]:
    """Names of the ops in ``packets`` that do dense matmul work but have no formula in ``registry``."""
    names = set()
    for packet in packets:
        name = str(getattr(packet, "__name__", packet))
        if packet not in registry and any(fragment in name for fragment in DENSE_OP_FRAGMENTS):
            names.add(f"aten.{name}")
    return tuple(sorted(names))


def step_flops(model: torch.nn.Module, loss_fn: Any, inputs: Any, targets: torch.Tensor, precision: str) -> StepFlops:
    """FLOPs of one forward + backward on this batch (gradients are discarded afterwards)."""
    with FlopCounterMode(display=False) as counter, _OpNames() as seen:
        with autocast_context(targets.device.type, precision):
            loss = loss_fn(model(inputs), targets)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return StepFlops(int(counter.get_total_flops()), uncounted_dense_ops(seen.packets, counter.flop_registry))


@functools.lru_cache(maxsize=4)
def cpu_peak_flops(dtype_name: str) -> float:
    """Best-of-N FLOP/s of an N x N matmul on this CPU in ``dtype_name`` ("fp32" or "bf16")."""
    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
    n = PEAK_MATMUL_N
    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    torch.mm(a, b)  # warm-up: oneDNN picks and caches its kernel here
    best = float("inf")
    for _ in range(PEAK_REPEATS):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2.0 * n**3 / best


def peak_flops(device: torch.device, precision: str) -> Peak:
    """The peak this step's MFU is measured against."""
    if dev.is_cuda(device):
        info = dev.describe_device(device)
        return Peak(
            info.peak_flops_bf16,
            "bf16/fp16 tensor core",
            f"datasheet ({info.name})" if info.peak_flops_bf16 else f"unknown GPU {info.name}",
        )
    dtype = "bf16" if precision == "bf16" else "fp32"
    return Peak(cpu_peak_flops(dtype), dtype, f"{PEAK_MATMUL_N}x{PEAK_MATMUL_N} {dtype} matmul on this CPU")


def mfu(flops_per_sample: float | None, samples_per_s: float, peak: Peak) -> float | None:
    """Utilization in [0, 1] (None when FLOPs or the peak are unknown)."""
    if not flops_per_sample or not peak.flops_per_s:
        return None
    return flops_per_sample * samples_per_s / peak.flops_per_s
