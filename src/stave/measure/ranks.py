"""Per-rank timing records: the common input of the rank rules (RANK_STRAGGLER, RANK_IMBALANCE).

Both ``stave trace`` (from per-rank profiler traces) and the distributed doctor (from per-rank
doctor records) reduce what they measured to one :class:`RankTiming` per rank, so one rule serves
both. Nothing here compares clocks across ranks: the last rank to arrive at a collective is the
one that waits least inside it, which holds whatever the clock offsets between nodes are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # measure/record.py is a sibling; only the annotation needs it
    from stave.measure.record import RunRecord

# A rank's record says how its script ended (RunInfo.stopped_by); the merge adds "killed" and
# "running" for ranks whose process died or is still going without a final record.
_STATUS = {"error": "crashed", "interrupt": "interrupted", "killed": "killed", "running": "running"}


def rank_status(record: "RunRecord") -> str:
    """"ok", "crashed", "interrupted", "killed" or "running", from the record's ending.

    The one rank status: the merge, the per-rank timings and the doctor's rank rows all read it.
    """
    return _STATUS.get(record.run.stopped_by, "ok")


@dataclass
class RankTiming:
    """One rank's per-step means (seconds) and memory, as measured on that rank.

    ``collective_wait_s``: time per step inside collectives (all-reduce, barriers) on this rank.
    ``data_wait_s``, ``compute_s``, ``host_s``: what the rank did outside them, per step
    (compute = forward + backward + optimizer, or kernel time from a trace; host = the rest).
    """

    rank: int
    step_time_s: float
    collective_wait_s: float
    data_wait_s: float = 0.0
    compute_s: float = 0.0
    host_s: float = 0.0
    steps: int = 0
    memory_peak_bytes: int | None = None
    hostname: str = ""
    status: str = "ok"
    source: str = "doctor"
    # Seconds inside collectives per counted step, by step index (empty where only means are known,
    # as from a trace): which rank arrived last, step by step.
    collective_wait_by_step: dict[int, float] = field(default_factory=dict)
