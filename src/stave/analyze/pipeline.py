"""The input pipeline in numbers: what loading one sample costs, where, and on-CPU or blocked.

Reduces the per-worker accounts (:class:`~stave.measure.pipeline.WorkerStats`) of the loader the
training loop iterated to per-sample costs: wall and CPU time per sample, the share of it spent
off-CPU (blocked on reads, sleeping, or waiting for a core), each stage's cost, and the I/O
pattern (opens, read calls and bytes per sample). Counters a worker could not read stay ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stave.measure.config import LoaderInfo, training_loader
from stave.measure.pipeline import StageStat, WorkerStats
from stave.measure.record import RunRecord


@dataclass
class StageCost:
    """One stage of loading a sample, per sample (``share``: of the loading wall time)."""

    name: str
    wall_s_per_sample: float
    cpu_s_per_sample: float
    share: float


@dataclass
class PipelineSummary:
    """The main training loader's cost per sample, summed over its workers (or the main process).

    ``wall_s_per_sample`` / ``cpu_s_per_sample`` cover ``__getitem__`` (reads, decode, transforms)
    plus the collate share of each sample; ``off_cpu_share`` is ``1 - cpu / wall`` of that, and
    ``run_delay_s_per_sample`` the part of it spent runnable but waiting for a free core.
    ``None`` fields: the counter was hidden from the workers.

    These are steady-state costs: each process's first batch pays its one-time start-up too (lazy
    opens, an index parsed on first use), and what it cost beyond the steady per-sample cost is
    taken out of the totals and of the ``load`` stage and kept as ``startup_wall_s`` /
    ``startup_cpu_s`` (all processes together; with non-persistent workers paid every epoch, which
    is DATA_WORKER_STARTUP's business, not a per-sample cost).
    """

    loader: LoaderInfo
    in_main_process: bool
    workers_reporting: int = 0
    samples: int = 0
    batches: int = 0
    wall_s_per_sample: float = 0.0
    cpu_s_per_sample: float = 0.0
    off_cpu_share: float = 0.0
    stages: list[StageCost] = field(default_factory=list)
    opens_per_sample: float | None = None
    read_calls_per_sample: float | None = None
    read_chars_per_sample: float | None = None
    read_bytes_per_sample: float | None = None
    run_delay_s_per_sample: float | None = None
    startup_wall_s: float = 0.0
    startup_cpu_s: float = 0.0

    @property
    def bytes_per_read_call(self) -> float | None:
        """Mean bytes returned by one read call (``None`` when the counters are absent)."""
        if self.read_calls_per_sample and self.read_chars_per_sample is not None:
            return self.read_chars_per_sample / self.read_calls_per_sample
        return None

    def top_stage(self) -> StageCost | None:
        """The most expensive stage by wall time (``None`` when no stage was timed)."""
        return self.stages[0] if self.stages else None


def main_loader(record: RunRecord) -> LoaderInfo | None:
    """The loader the training loop drew most batches from (validation loaders draw fewer)."""
    return training_loader(record.config.loaders)


def _sum_optional(values: list[int | None]) -> int | None:
    # One hidden counter makes the sum unknown: a partial sum would read as a smaller number.
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


def _merge_stages(workers: list[WorkerStats]) -> dict[str, StageStat]:
    merged: dict[str, StageStat] = {}
    for w in workers:
        for st in w.stages:
            acc = merged.setdefault(st.name, StageStat(st.name))
            acc.samples += st.samples
            acc.wall_ns += st.wall_ns
            acc.cpu_ns += st.cpu_ns
    return merged


def _startup_excess_ns(workers: list[WorkerStats], wall_ns: int, cpu_ns: int, samples: int) -> tuple[int, int]:
    """(wall, CPU) the processes' first batches cost beyond the steady per-sample cost.

    The steady cost is that of all the batches after the first ones; without any (every process
    loaded one batch) nothing can be told apart and nothing is taken out.
    """
    first_samples = sum(w.first_batch_samples for w in workers)
    first_wall = sum(w.first_batch_wall_ns for w in workers)
    first_cpu = sum(w.first_batch_cpu_ns for w in workers)
    rest = samples - first_samples
    if first_samples <= 0 or rest <= 0:
        return 0, 0
    steady_wall = (wall_ns - first_wall) / rest
    steady_cpu = (cpu_ns - first_cpu) / rest
    return (max(0, int(first_wall - steady_wall * first_samples)),
            max(0, int(first_cpu - steady_cpu * first_samples)))


def summarize_pipeline(record: RunRecord) -> PipelineSummary | None:
    """Per-sample costs of the main loader; ``None`` when no loader ran or no worker reported."""
    loader = main_loader(record)
    if loader is None:
        return None
    workers = [w for w in record.workers if w.loader_id == loader.loader_id and w.samples > 0]
    if not workers:
        return None
    samples = sum(w.samples for w in workers)
    stages = _merge_stages(workers)
    getitem_wall_ns = sum(w.getitem_wall_ns for w in workers)
    getitem_cpu_ns = sum(w.getitem_cpu_ns for w in workers)
    collate = stages.get("collate")
    # Collation happens once per batch; spread over the samples it packed, it is part of a sample's cost.
    wall_ns = getitem_wall_ns + (collate.wall_ns if collate else 0)
    cpu_ns = getitem_cpu_ns + (collate.cpu_ns if collate else 0)
    startup_wall_ns, startup_cpu_ns = _startup_excess_ns(workers, wall_ns, cpu_ns, samples)
    wall_ns -= startup_wall_ns
    cpu_ns -= startup_cpu_ns
    load = stages.get("load")
    if load is not None and (startup_wall_ns or startup_cpu_ns):
        # Start-up is work outside the transforms (opening, parsing): the load stage's share.
        stages["load"] = StageStat("load", load.samples, max(0, load.wall_ns - startup_wall_ns),
                                   max(0, load.cpu_ns - startup_cpu_ns))
    out = PipelineSummary(
        loader=loader,
        in_main_process=all(w.worker_id < 0 for w in workers),
        workers_reporting=len(workers),
        samples=samples,
        batches=sum(w.batches for w in workers),
        wall_s_per_sample=wall_ns / 1e9 / samples,
        cpu_s_per_sample=cpu_ns / 1e9 / samples,
        off_cpu_share=max(0.0, 1.0 - cpu_ns / wall_ns) if wall_ns > 0 else 0.0,
        startup_wall_s=startup_wall_ns / 1e9,
        startup_cpu_s=startup_cpu_ns / 1e9,
    )
    costs = [
        StageCost(
            name=st.name,
            wall_s_per_sample=st.wall_ns / 1e9 / samples,
            cpu_s_per_sample=st.cpu_ns / 1e9 / samples,
            share=st.wall_ns / wall_ns if wall_ns > 0 else 0.0,
        )
        for st in stages.values()
    ]
    out.stages = sorted(costs, key=lambda c: c.wall_s_per_sample, reverse=True)
    for attr in ("opens", "read_calls", "read_chars", "read_bytes"):
        total = _sum_optional([getattr(w, attr) for w in workers])
        setattr(out, f"{attr}_per_sample", total / samples if total is not None else None)
    delay = _sum_optional([w.run_delay_ns for w in workers])
    out.run_delay_s_per_sample = delay / 1e9 / samples if delay is not None else None
    return out
