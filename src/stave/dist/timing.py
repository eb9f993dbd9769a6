"""Reduce per-rank doctor records to :class:`~stave.measure.ranks.RankTiming` for the rank rules.

Per rank, the step time (:func:`stave.measure.steps.step_time_s`, the median, as from a trace) and
means over its counted steps (seconds per step):

- ``collective_wait_s``: time waiting for DDP's gradient all-reduce after this rank's own backward
  compute was done (``StepRecord.comm_wait_ns``; see :mod:`stave.dist.comm`);
- ``data_wait_s``: the data-wait phase;
- ``compute_s``: forward + backward + optimizer, less the collective wait (DDP waits for the
  all-reduce inside backward, and that wait is not compute);
- ``host_s``: host-to-device copies and the unattributed rest of the step.

Memory is the device's peak where there is a device, else the peak RSS of the rank's process tree.
"""

from __future__ import annotations

from typing import Sequence

from stave.measure.ranks import RankTiming, rank_status
from stave.measure.record import RunRecord
from stave.measure.steps import step_time_s


def _peak(values: list[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def rank_timing(record: RunRecord) -> RankTiming:
    """One rank's per-step means and peak memory."""
    counted = record.counted_steps()
    n = len(counted)
    mem = _peak([h.cuda_peak_bytes for h in record.host])
    if mem is None:
        mem = _peak([h.rss_bytes for h in record.host])
    timing = RankTiming(
        rank=record.run.rank,
        step_time_s=0.0,
        collective_wait_s=0.0,
        steps=n,
        memory_peak_bytes=mem,
        hostname=record.run.hostname,
        status=rank_status(record),
        source="doctor",
    )
    if n == 0:
        return timing

    def mean_s(values: Sequence[int]) -> float:
        return sum(values) / n / 1e9

    comm = [s.comm_wait_ns for s in counted]
    timing.step_time_s = step_time_s(s.duration_ns / 1e9 for s in counted)
    timing.collective_wait_s = mean_s(comm)
    timing.collective_wait_by_step = {s.index: s.comm_wait_ns / 1e9 for s in counted}
    timing.data_wait_s = mean_s([s.data_wait_ns for s in counted])
    timing.compute_s = mean_s([max(0, s.forward_ns + s.backward_ns + s.optimizer_ns - s.comm_wait_ns) for s in counted])
    timing.host_s = mean_s([s.h2d_ns + s.other_ns for s in counted])
    return timing


def rank_timings(records: Sequence[RunRecord]) -> list[RankTiming]:
    """One :class:`RankTiming` per record, ordered by rank."""
    return [rank_timing(r) for r in sorted(records, key=lambda r: r.run.rank)]
