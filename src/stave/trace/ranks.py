"""Reduce one rank's trace analysis to the shared per-rank record, :class:`RankTiming`.

The rank rules (RANK_STRAGGLER, RANK_IMBALANCE) read the same record from traces and from the
distributed doctor. From a trace, per step (means over the analysed steps):

* ``collective_wait_s``: time inside collectives. On a GPU: communication kernels (NCCL...) running,
  a collective kernel starts when its rank reaches it and ends when the slowest rank has arrived,
  so a rank that arrives early spends longer inside it. On CPU-only traces: collective spans on the
  host (``gloo:all_reduce``...). No clock is compared across ranks.
* ``data_wait_s``: the ``dataloader`` part of the additive breakdown.
* ``compute_s``: the ``kernel`` part (GPU) or forward + backward + optimizer (CPU-only).
* ``host_s``: runtime + cpu_exec + other (GPU), or other (CPU-only): host time with no GPU work.
* ``memory_peak_bytes``: the peak allocated bytes from ``[memory]`` events, when the profiler ran
  with ``profile_memory=True``.
"""

from __future__ import annotations

from stave.measure.ranks import RankTiming
from stave.trace.analysis import TraceAnalysis

_GPU_HOST_PARTS = ("runtime", "cpu_exec", "other")
_CPU_COMPUTE_PARTS = ("forward", "backward", "optimizer")


def rank_timing(analysis: TraceAnalysis) -> RankTiming:
    """The RankTiming of one rank's trace (definitions in the module docstring)."""
    mean = analysis.part_mean_s
    if analysis.kind == "gpu":
        compute = mean("kernel")
        host = sum(mean(p) for p in _GPU_HOST_PARTS)
    else:
        compute = sum(mean(p) for p in _CPU_COMPUTE_PARTS)
        host = mean("other")
    peaks = analysis.memory_peak_bytes
    cuda_peaks = [v for k, v in peaks.items() if k.startswith("cuda")]
    memory = max(cuda_peaks) if cuda_peaks else peaks.get("cpu")
    return RankTiming(
        rank=analysis.rank,
        step_time_s=analysis.step_time_median_s,
        collective_wait_s=analysis.collective_s_per_step,
        data_wait_s=mean("dataloader"),
        compute_s=compute,
        host_s=host,
        steps=analysis.step_count,
        memory_peak_bytes=memory,
        hostname="",
        status="ok",
        source="trace",
    )
