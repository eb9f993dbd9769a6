"""The only module that touches ``torch.cuda`` and NVML.

Everything else takes a ``device`` and calls these helpers, so the same code path runs on a CPU-only
machine: a CUDA stream becomes a no-op context, a CUDA event becomes a host clock reading, a GPU
memory counter becomes ``None`` (absent, never 0). NVML (``nvidia-ml-py``) is imported lazily; a
machine without it, or without a GPU, is normal.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import platform
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

log = logging.getLogger(__name__)


def cuda_available() -> bool:
    """True when a CUDA device can be used (never initializes CUDA when the build has none)."""
    return torch.cuda.is_available()


def resolve_device(device: str | torch.device | None) -> torch.device:
    """Turn ``None``/"auto" into ``cuda`` when a GPU is present, else ``cpu``."""
    if device is None or device == "auto":
        return torch.device("cuda" if cuda_available() else "cpu")
    return torch.device(device)


def is_cuda(device: str | torch.device | None) -> bool:
    """True when ``device`` names a CUDA device."""
    return device is not None and torch.device(device).type == "cuda"


# --- Host facts ---------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU feature flags from /proc/cpuinfo (empty where the file is absent)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        log.debug("no /proc/cpuinfo; CPU flags unknown")
    return frozenset()


@functools.lru_cache(maxsize=1)
def cpu_model_name() -> str:
    """A human-readable CPU model name."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        log.debug("no /proc/cpuinfo; using platform.processor()")
    return platform.processor() or platform.machine()


def cpu_has_native_bf16() -> bool:
    """True when the CPU executes bf16 math natively (AVX512-BF16, AMX-BF16, or Arm BF16).

    Without these, bf16 autocast on CPU emulates through fp32 and is usually slower.
    """
    flags = cpu_flags()
    return bool({"avx512_bf16", "amx_bf16", "bf16"} & flags)


def usable_cores() -> int:
    """Cores this process may run on (CPU affinity / cgroup cpuset), not the machine's total."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# --- Device description -------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceInfo:
    """What the compute device is; GPU-only fields are ``None`` on CPU."""

    type: str
    name: str
    index: int | None = None
    compute_capability: tuple[int, int] | None = None
    total_memory_bytes: int | None = None
    bf16_native: bool = False
    fp16_tensor_cores: bool = False
    peak_flops_bf16: float | None = None


# Dense bf16/fp16 tensor-core peak FLOP/s from vendor datasheets (no sparsity), for MFU on GPUs.
KNOWN_GPU_PEAK_FLOPS: dict[str, float] = {
    "H200": 989e12,
    "H100 SXM": 989e12,
    "H100 PCIe": 756e12,
    "H100": 989e12,
    "A100": 312e12,
    "A10G": 125e12,
    "A10": 125e12,
    "L40S": 362e12,
    "L4": 121e12,
    "V100": 125e12,
    "T4": 65e12,
    "RTX 4090": 165e12,
    "RTX 3090": 71e12,
}


def known_gpu_peak_flops(name: str) -> float | None:
    """Peak dense bf16/fp16 FLOP/s for a GPU name, or None when the model is not in the table."""
    for key in sorted(KNOWN_GPU_PEAK_FLOPS, key=len, reverse=True):
        if key.lower() in name.lower():
            return KNOWN_GPU_PEAK_FLOPS[key]
    return None


def describe_device(device: str | torch.device | None = None) -> DeviceInfo:
    """Describe the compute device (CPU model, or GPU name, capability and memory)."""
    dev = resolve_device(device)
    if dev.type == "cuda" and cuda_available():
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        capability = (props.major, props.minor)
        return DeviceInfo(
            type="cuda",
            name=props.name,
            index=index,
            compute_capability=capability,
            total_memory_bytes=int(props.total_memory),
            bf16_native=capability >= (8, 0),
            fp16_tensor_cores=capability >= (7, 0),
            peak_flops_bf16=known_gpu_peak_flops(props.name),
        )
    return DeviceInfo(type=dev.type, name=cpu_model_name(), bf16_native=cpu_has_native_bf16())


# --- Clocks: CUDA events on a GPU, the host clock on CPU ---------------------------------------


@dataclass
class Mark:
    """A point in time: always the host clock; on a GPU also an event recorded on the current stream."""

    host_ns: int
    event: Any = None


class StepClock:
    """Timestamps for phase boundaries.

    On a GPU each mark also records a CUDA event on the current stream. The events are read later
    (:meth:`ready`, :meth:`elapsed_ns`) once the GPU has passed them, so marking never adds a sync to
    the user's hot path. On CPU the host clock is the truth and the same calls just return it.
    """

    def __init__(self, device: str | torch.device | None = None) -> None:
        self.use_events = is_cuda(resolve_device(device)) and cuda_available()

    def mark(self) -> Mark:
        """Take a timestamp now (host) and, on a GPU the script is using, enqueue an event.

        No event is recorded before the script has initialized CUDA itself: recording one would
        create a CUDA context on the default device (on a multi-GPU node, every rank on GPU 0)
        before the script picks its own. Until then marks are host-only.
        """
        if self.use_events and torch.cuda.is_initialized():
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return Mark(time.perf_counter_ns(), event)
        return Mark(time.perf_counter_ns())

    @staticmethod
    def ready(mark: Mark) -> bool:
        """True when the mark's event has completed on the GPU (always True on CPU)."""
        return mark.event is None or bool(mark.event.query())

    @staticmethod
    def elapsed_ns(start: Mark, end: Mark) -> int:
        """Device time between two marks (GPU events when both have one, else the host clock)."""
        if start.event is not None and end.event is not None:
            return int(start.event.elapsed_time(end.event) * 1e6)
        return end.host_ns - start.host_ns


# --- Streams, synchronization and memory ---------------------------------------------------------


def synchronize(device: str | torch.device | None = None) -> None:
    """Wait for all work on ``device`` (no-op on CPU). Never call this in a hot loop."""
    if is_cuda(resolve_device(device)) and cuda_available():
        torch.cuda.synchronize()


def new_stream(device: str | torch.device) -> Any:
    """A side stream on a GPU, ``None`` on CPU (so callers need no branches)."""
    if is_cuda(device) and cuda_available():
        return torch.cuda.Stream(device=torch.device(device))
    return None


def stream_context(stream: Any) -> contextlib.AbstractContextManager[Any]:
    """``torch.cuda.stream(stream)`` on a GPU, a no-op context when ``stream`` is None."""
    if stream is None:
        return contextlib.nullcontext()
    return torch.cuda.stream(stream)


def wait_stream(stream: Any) -> None:
    """Make the current stream wait for ``stream`` (no-op when ``stream`` is None)."""
    if stream is not None:
        torch.cuda.current_stream().wait_stream(stream)


def record_stream(tensor: torch.Tensor, stream: Any = None) -> None:
    """Tell the caching allocator ``tensor`` is used on the current stream (no-op on CPU).

    Needed when a tensor allocated on a side stream is consumed on the compute stream, so its
    memory is not handed out again before the compute stream is done with it.
    """
    if tensor.is_cuda:
        tensor.record_stream(stream if stream is not None else torch.cuda.current_stream())


def record_event(stream: Any = None) -> Any:
    """Record a CUDA event on ``stream`` (the current stream when None); ``None`` on CPU.

    Used to know when an asynchronous copy out of a reusable pinned buffer has finished.
    """
    if not cuda_available() or not torch.cuda.is_initialized():
        return None
    event = torch.cuda.Event()
    event.record(stream)
    return event


def wait_event(event: Any) -> None:
    """Block the host until ``event`` has completed (no-op for ``None``)."""
    if event is not None:
        event.synchronize()


def pin_memory_available() -> bool:
    """Pinned (page-locked) host memory only helps, and only works, with a GPU."""
    return cuda_available()


def is_pinned(tensor: torch.Tensor) -> bool:
    """Whether a CPU tensor is in pinned memory (always False without CUDA, without asking it)."""
    if not cuda_available() or tensor.device.type != "cpu":
        return False
    return bool(tensor.is_pinned())


def memory_allocated_bytes(device: str | torch.device | None = None) -> int | None:
    """Bytes held by live tensors on the GPU, ``None`` on CPU."""
    dev = resolve_device(device)
    if is_cuda(dev) and cuda_available() and torch.cuda.is_initialized():
        return int(torch.cuda.memory_allocated(dev))
    return None


def max_memory_allocated_bytes(device: str | torch.device | None = None) -> int | None:
    """Peak bytes held by tensors on the GPU since the last reset, ``None`` on CPU."""
    dev = resolve_device(device)
    if is_cuda(dev) and cuda_available() and torch.cuda.is_initialized():
        return int(torch.cuda.max_memory_allocated(dev))
    return None


def reset_peak_memory(device: str | torch.device | None = None) -> None:
    """Reset the GPU peak-memory counter (no-op on CPU)."""
    dev = resolve_device(device)
    if is_cuda(dev) and cuda_available() and torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats(dev)


def free_memory_bytes(device: str | torch.device | None = None) -> int | None:
    """Free GPU memory as the driver sees it, ``None`` on CPU."""
    dev = resolve_device(device)
    if is_cuda(dev) and cuda_available():
        free, _total = torch.cuda.mem_get_info(dev)
        return int(free)
    return None


def empty_cache() -> None:
    """Release cached GPU memory (no-op on CPU)."""
    if cuda_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def is_out_of_memory(exc: BaseException) -> bool:
    """True for a device out-of-memory error (CUDA) or a host allocation failure."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(exc, (MemoryError, RuntimeError)) and "out of memory" in str(exc).lower()


def cudnn_flags() -> dict[str, bool]:
    """cuDNN settings that matter for speed: benchmark autotuning and deterministic mode."""
    return {
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
    }


def set_cudnn_benchmark(enabled: bool) -> bool:
    """Set ``torch.backends.cudnn.benchmark`` (process-wide); returns the previous value."""
    previous = bool(torch.backends.cudnn.benchmark)
    torch.backends.cudnn.benchmark = enabled
    return previous


def tf32_enabled() -> bool:
    """Whether fp32 matmuls and convolutions may use TF32 tensor cores (matmul and cuDNN flags both on)."""
    return bool(torch.backends.cuda.matmul.allow_tf32) and bool(torch.backends.cudnn.allow_tf32)


def set_tf32(enabled: bool) -> tuple[bool, bool]:
    """Allow (or forbid) TF32 for fp32 matmuls and cuDNN convolutions (process-wide); returns the
    previous (matmul, cudnn) flags for :func:`restore_tf32`."""
    previous = (bool(torch.backends.cuda.matmul.allow_tf32), bool(torch.backends.cudnn.allow_tf32))
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    return previous


def restore_tf32(previous: tuple[bool, bool]) -> None:
    """Set the TF32 flags back to what :func:`set_tf32` returned."""
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = previous


def make_graphed_module(module: torch.nn.Module, sample_inputs: torch.Tensor) -> Callable[..., Any]:
    """``module``'s forward and backward captured as CUDA graphs for inputs shaped like ``sample_inputs``.

    Wraps ``torch.cuda.make_graphed_callables`` (which warms up on a side stream, then captures);
    the optimizer step stays outside the graph. Needs static shapes and no host sync in forward.
    """
    if not sample_inputs.is_cuda:
        raise ValueError("CUDA graphs need a CUDA module and inputs; this tensor is on " + str(sample_inputs.device))
    sample = sample_inputs.detach().clone().requires_grad_(sample_inputs.requires_grad)
    return torch.cuda.make_graphed_callables(module, (sample,))


# --- Counting synchronizing CUDA calls -----------------------------------------------------------

# Functions under torch.cuda that block the host until the GPU catches up, or that throw away the
# caching allocator's work; calling them every step is a finding (SYNC_IN_LOOP, EMPTY_CACHE_IN_LOOP).
_CUDA_CALLS_TO_COUNT = ("synchronize", "empty_cache")


def install_cuda_call_counter(callback: Callable[[str], None]) -> Callable[[], None]:
    """Wrap ``torch.cuda.synchronize``/``empty_cache`` so each call reports its name to ``callback``.

    Returns a function that restores the originals. On CPU the wrappers are installed too (the
    calls are then cheap no-ops or errors of torch's own), so the same code path is exercised.
    """
    originals: dict[str, Callable[..., Any]] = {}
    for name in _CUDA_CALLS_TO_COUNT:
        original = getattr(torch.cuda, name)
        originals[name] = original

        def wrapper(*args: Any, _name: str = name, _orig: Callable[..., Any] = original, **kwargs: Any) -> Any:
            callback(_name)
            return _orig(*args, **kwargs)

        functools.update_wrapper(wrapper, original)
        setattr(torch.cuda, name, wrapper)

    def restore() -> None:
        for name, original in originals.items():
            setattr(torch.cuda, name, original)

    return restore


# --- NVML ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuReading:
    """One NVML reading; a field the driver does not report is ``None``."""

    util_pct: float | None
    mem_used_bytes: int | None
    power_w: float | None


class NvmlReader:
    """Reads utilization, memory and power of one GPU through NVML.

    :meth:`open` returns ``None`` (and logs why at debug level) when NVML or a GPU is absent.
    """

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml = nvml
        self._handle = handle

    @classmethod
    def open(cls, index: int = 0) -> "NvmlReader | None":
        """Open GPU ``index``; ``None`` when there is no NVML or no such GPU."""
        if not cuda_available():
            return None
        try:
            import pynvml  # nvidia-ml-py
        except ImportError:
            log.debug("nvidia-ml-py is not installed; GPU utilization will be absent")
            return None
        try:
            pynvml.nvmlInit()
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            physical = index
            if visible:
                ids = [v.strip() for v in visible.split(",") if v.strip()]
                if index < len(ids) and ids[index].isdigit():
                    physical = int(ids[index])
            handle = pynvml.nvmlDeviceGetHandleByIndex(physical)
        except pynvml.NVMLError as exc:
            log.debug("NVML unavailable: %s", exc)
            return None
        return cls(pynvml, handle)

    def read(self) -> GpuReading:
        """One reading; fields NVML refuses (containers hide some) are ``None``."""
        nvml = self._nvml
        util = mem = power = None
        try:
            util = float(nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)
        except nvml.NVMLError:
            util = None
        try:
            mem = int(nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
        except nvml.NVMLError:
            mem = None
        try:
            power = nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0
        except nvml.NVMLError:
            power = None
        return GpuReading(util, mem, power)

    def close(self) -> None:
        """Shut NVML down."""
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:
            log.debug("nvmlShutdown failed: %s", exc)


def iter_cuda_devices() -> Iterator[int]:
    """Indices of the visible CUDA devices (none on CPU)."""
    if cuda_available():
        yield from range(torch.cuda.device_count())
