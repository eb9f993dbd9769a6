"""Synthetic per-rank records for the distributed unit tests (realistic numbers, chosen per test)."""

from __future__ import annotations

from dataclasses import dataclass

from stave.measure.config import LoaderInfo
from stave.measure.dist import DistInfo
from stave.measure.host import HostSample
from stave.measure.record import RunInfo, RunRecord
from stave.measure.steps import StepRecord

MS = 1_000_000


@dataclass
class StepShape:
    """One step's phases in milliseconds (other = what is left of ``total``)."""

    total: float
    data: float = 0.0
    fwd: float = 0.0
    bwd: float = 0.0
    opt: float = 0.0
    comm: float = 0.0
    backward_calls: int = 1


def steps_from(shapes: list[StepShape], warmup: int = 0) -> list[StepRecord]:
    out = []
    t = 1_000 * MS
    for i, sh in enumerate(shapes):
        start = t
        t += int(sh.total * MS)
        out.append(StepRecord(
            index=i, start_ns=start, end_ns=t, data_wait_ns=int(sh.data * MS), forward_ns=int(sh.fwd * MS),
            backward_ns=int(sh.bwd * MS), optimizer_ns=int(sh.opt * MS), comm_wait_ns=int(sh.comm * MS),
            samples=32, data_fetches=1, forward_calls=sh.backward_calls, backward_calls=sh.backward_calls,
            warmup=i < warmup,
        ))
    return out


def loader(first: list[int], dataset_len: int = 4096, epoch: int | None = None, sampler: str = "DistributedSampler",
           batches: int = 20, loader_id: int = 0) -> LoaderInfo:
    return LoaderInfo(
        loader_id=loader_id, num_workers=0, batch_size=32, pin_memory=False, persistent_workers=False,
        prefetch_factor=None, drop_last=False, multiprocessing_context=None, dataset_type="Numbers",
        dataset_len=dataset_len, sampler_type=sampler, batches=batches, first_indices=list(first),
        epoch_samples=epoch,
    )


def record(rank: int, world: int = 2, shapes: list[StepShape] | None = None, stopped_by: str = "steps",
           hostname: str = "node0", pid: int | None = None, loaders: list[LoaderInfo] | None = None,
           dist: DistInfo | None = None, rss: int | None = 1 << 30, run_id: str = "run-a",
           started_at: str = "2025-01-01T00:00:00+00:00", error: str | None = None) -> RunRecord:
    shapes = shapes if shapes is not None else [StepShape(100, data=5, fwd=30, bwd=50, opt=10)] * 8
    info = dist or DistInfo(comm_hook="allreduce (default)", rounds_by_step=[1] * len(shapes))
    info.run_id = run_id
    info.world_size = world
    rec = RunRecord(
        run=RunInfo(script="train.py", rank=rank, local_rank=rank, world_size=world, hostname=hostname,
                    pid=pid if pid is not None else 1000 + rank, stopped_by=stopped_by, started_at=started_at,
                    script_exit_code=0 if stopped_by in ("steps", "end") else None, error=error),
        steps=steps_from(shapes),
        host=[HostSample(t_ns=i * 100 * MS, rss_bytes=rss) for i in range(3)] if rss is not None else [],
        dist=info,
    )
    if loaders is not None:
        rec.config.loaders = loaders
    return rec
