"""What one rank of a distributed run measured about the distribution itself.

Filled by :mod:`stave.dist.hooks` on every rank of a multi-process run (``world_size > 1``); a
single process leaves the defaults. Collective waits per step live in
:attr:`stave.measure.steps.StepRecord.comm_wait_ns`; this holds the launch identity and the
counters the distributed rules need (communication rounds, DDP's unused-parameter search).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DistInfo:
    """One rank's launch identity and DDP counters.

    ``run_id`` identifies the launch all ranks belong to (the rendezvous id, the SLURM job), so a
    merge never mixes records of two runs that shared a directory. ``launch_id`` is the stave
    launcher process that started this rank (empty under a launcher the user started).
    ``comm_hook``: what the doctor timed: ``"allreduce (default)"``, the user's hook's name, or
    ``None`` when no DDP gradient communication was timed (then ``comm_wait_ns`` is absent, not 0).
    ``rounds_by_step[i]``: gradient synchronizations (backward passes that all-reduced) in step i.
    ``find_unused_ns_by_step[i]``: time in DDP's search for unused parameters after forward, step i.
    ``unused_params``: parameters without a gradient after a synchronized backward (largest count
    seen over the checked steps), ``None`` when not checked.
    """

    run_id: str = ""
    launch_id: str = ""
    backend: str | None = None
    world_size: int = 1
    node_rank: int | None = None
    restart_count: int = 0
    record_interval_s: float | None = None
    ddp_models: int = 0
    comm_hook: str | None = None
    comm_buckets: int = 0
    comm_bytes: int = 0
    rounds_by_step: list[int] = field(default_factory=list)
    find_unused_parameters: bool = False
    static_graph: bool = False
    find_unused_ns_by_step: list[int] = field(default_factory=list)
    ddp_params: int = 0
    unused_params: int | None = None
