"""What the input pipeline and the copies did: loader worker stages, I/O counters, H2D copies, syncs."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class StageStat:
    """Time one stage of sample loading took, summed over ``samples`` samples.

    Stages: ``load`` (the dataset's ``__getitem__`` minus its transforms: file reads and decode),
    one entry per transform of a torchvision ``Compose`` (by class name), and ``collate``.
    ``cpu_ns`` is the thread's CPU time, so ``wall_ns - cpu_ns`` is time off-CPU (blocked on I/O,
    sleeping, waiting for a lock).
    """

    name: str
    samples: int = 0
    wall_ns: int = 0
    cpu_ns: int = 0

    @property
    def wall_us_per_sample(self) -> float:
        """Mean wall time per sample in microseconds."""
        return self.wall_ns / 1e3 / self.samples if self.samples else 0.0


@dataclass
class WorkerStats:
    """One loader worker's account (worker_id -1 is the main process when ``num_workers=0``).

    I/O counters come from ``/proc/<pid>/io`` (psutil ``io_counters``) and a count of ``open()``
    calls; they are ``None`` where the machine hides them.
    """

    worker_id: int
    pid: int
    loader_id: int = 0
    samples: int = 0
    batches: int = 0
    getitem_wall_ns: int = 0
    getitem_cpu_ns: int = 0
    stages: list[StageStat] = field(default_factory=list)
    opens: int | None = None
    read_calls: int | None = None
    read_chars: int | None = None
    read_bytes: int | None = None
    alive_ns: int = 0
    # Time the loading thread sat runnable but waiting for a core during fetches (schedstat
    # run_delay): separates "off-CPU because blocked on I/O" from "off-CPU because no core was free".
    run_delay_ns: int | None = None
    # The process's first fetch (its samples, and their __getitem__ plus collate wall and CPU): a
    # worker's first batch also pays its one-time start-up (lazy file opens, an index parsed on
    # first use), which the steady per-sample cost must not include (analyze/pipeline.py).
    first_batch_samples: int = 0
    first_batch_wall_ns: int = 0
    first_batch_cpu_ns: int = 0


@dataclass
class CopyStat:
    """Host-to-device (or device-to-host) copies with the same properties, aggregated."""

    direction: str
    dtype: str
    pinned: bool
    non_blocking: bool
    count: int = 0
    nbytes: int = 0
    host_ns: int = 0


@dataclass
class SyncSite:
    """A call that makes the host wait for the GPU (``.item()``, ``.cpu()``, ``torch.cuda.synchronize``),
    counted per source line of the user's code."""

    kind: str
    file: str
    line: int
    function: str
    calls: int = 0
    steps_with_call: int = 0
