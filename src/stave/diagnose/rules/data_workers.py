"""DATA_WORKER_STARTUP and FORK_UNSAFE_HANDLE: what loader worker processes cost and risk.

Worker start-up: without ``persistent_workers`` every epoch (every ``iter(loader)``) starts the
workers anew, and the first batch of the epoch waits for them to start and fill the pipeline.
Fork-unsafe handles: a dataset that opens a file, HDF5, LMDB or SQLite handle in ``__init__`` hands
that same handle to every forked worker, which then share one file offset or one library state.
"""

from __future__ import annotations

from stave.analyze.loading import epoch_start_steps, epoch_starts_counted
from stave.analyze.pipeline import summarize_pipeline
from stave.analyze.stats import median
from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.inputs import DoctorInput
from stave.diagnose.rules._helpers import REPORT_MIN_SPEEDUP, dataloader_call, make_finding, saving_speedup
from stave.measure.config import LoaderInfo
from stave.measure.steps import PHASES

# Start methods that begin each worker as a fresh interpreter which imports torch and unpickles
# the dataset: seconds per worker rather than the milliseconds of a fork.
FRESH_INTERPRETER_METHODS = ("spawn", "forkserver")


def _refill_s(inp: DoctorInput, loader: LoaderInfo) -> float:
    """Seconds of each epoch start that persistent workers still wait: one batch's fetch.

    Persistent workers keep their processes and whatever they loaded across epochs, but a new
    iterator starts with an empty queue (prefetching does not cross epochs), so the epoch's first
    batch still waits for a worker to fetch, collate and hand it over: one batch at the loader's
    measured steady per-sample cost, plus what the delivery probe measured a worker's hand-over to
    cost beyond collating in the main process. 0 where the loader's costs were not measured.
    """
    pipe = summarize_pipeline(inp.record)
    if pipe is None or pipe.in_main_process or pipe.loader.loader_id != loader.loader_id:
        return 0.0
    batch = loader.batch_size or 0
    if batch <= 0:
        return 0.0
    probes = inp.record.probes
    delivery = 0.0
    if probes.delivery_worker_s is not None and probes.delivery_main_s is not None:
        delivery = max(0.0, probes.delivery_worker_s - probes.delivery_main_s)
    return pipe.wall_s_per_sample * batch + delivery


def _restart_cost_s(inp: DoctorInput, kept_s: float = 0.0) -> tuple[float, dict[str, float], int] | None:
    """(mean step, per phase the seconds per step that epoch starts cost beyond a typical step,
    epoch-start steps counted).

    With persistent workers an epoch's first steps cost about what a typical step costs. The cost
    is not only the data wait: forking the workers and their start-up work (parsing an index,
    opening files) take cores and copy-on-write page faults from the training process too, so
    those steps' compute phases run slow as well, and each phase's excess is what the fix gives
    back, less ``kept_s`` (seconds in all the counted steps) of data wait that the epoch starts
    keep with the fix.
    """
    counted = inp.record.counted_steps()
    starts = epoch_start_steps(inp.record)
    rest = [s for s in counted if s.index not in starts]
    if not starts or not rest:
        return None
    mean = sum(s.duration_ns for s in counted) / 1e9 / len(counted)
    saved: dict[str, float] = {}
    for phase in PHASES:
        typical = median([s.phase_ns(phase) / 1e9 for s in rest])
        excess = sum(max(s.phase_ns(phase) / 1e9 - typical, 0.0) for s in counted if s.index in starts)
        if phase == "data_wait":
            excess -= kept_s
        if excess > 0:
            saved[phase] = excess / len(counted)
    return mean, saved, len(starts)


@rule("DATA_WORKER_STARTUP", kind="doctor")
def data_worker_startup(inp: DoctorInput) -> Finding | None:
    """Each epoch restarts the loader's workers and the first batch waits for them."""
    record, summary = inp.record, inp.summary
    if summary.steps < 2 or not record.steps:
        return None
    best: Finding | None = None
    for loader in record.config.loaders:
        restarts = loader.iterators_created - 1
        waits = loader.first_batch_wait_ns[1:]
        if loader.num_workers == 0 or loader.persistent_workers or restarts < 1 or not waits:
            continue
        refill_s = _refill_s(inp, loader)
        times = _restart_cost_s(inp, refill_s * epoch_starts_counted(record, loader))
        if times is None:
            continue
        t, saved, stalls = times
        t_new = t - sum(saved.values())
        est = saving_speedup(inp, saved, t)
        if est < REPORT_MIN_SPEEDUP:
            continue
        first_wait_s = median([w / 1e9 for w in waits])
        method = loader.multiprocessing_context or "fork"
        note = ""
        if method in FRESH_INTERPRETER_METHODS:
            note = (
                f"# With {method!r} each worker is a fresh interpreter that imports torch and unpickles\n"
                "# the dataset; persistent workers pay that once per run instead of once per epoch.\n"
            )
        steps_per_epoch = len(record.steps) / loader.iterators_created
        finding = make_finding(
            "DATA_WORKER_STARTUP",
            est,
            f"Every epoch restarts {loader.num_workers} loader workers: the first batch waits "
            f"{first_wait_s:.2f} s (about {steps_per_epoch:.0f} steps per epoch)",
            {
                "num_workers": loader.num_workers,
                "start_method": method,
                "iterators_created": loader.iterators_created,
                "first_batch_wait_s": first_wait_s,
                "steps_per_epoch": steps_per_epoch,
                "epoch_start_steps_counted": stalls,
                "step_time_mean_s": t,
                "step_time_mean_without_restarts_s": t_new,
                "restart_s_per_step_by_phase": saved,
                "first_batch_fetch_kept_s": refill_s,
            },
            f"{note}{dataloader_call(loader, persistent_workers=True)}",
            explanation=(
                "persistent_workers=False shuts the workers down at the end of every epoch and starts "
                "new ones for the next; short epochs pay that start-up often. Estimate on the mean step "
                "time (the cost comes as one stall per epoch): each epoch's first steps costing what a "
                "typical step costs, in every phase (the fork and the workers' start-up also slow the "
                "training process's own compute), except that each epoch's first batch still waits for "
                "one batch's fetch in a worker (a new epoch starts with an empty queue)."
            ),
        )
        if best is None or finding.est_speedup > best.est_speedup:
            best = finding
    return best


# How to open each kind of handle lazily, once per worker.
_OPENERS = {
    "h5py.File": 'h5py.File(self.path, "r")',
    "lmdb.Environment": "lmdb.open(self.path, readonly=True, lock=False, readahead=False)",
    "sqlite3.Connection": "sqlite3.connect(self.path)",
    "zipfile.ZipFile": "zipfile.ZipFile(self.path)",
    "tarfile.TarFile": "tarfile.open(self.path)",
}


def _parse_handle(text: str) -> tuple[str, str]:
    """``"dataset.db -> h5py.File"`` -> (``"db"``, ``"h5py.File"``)."""
    where, _, kind = text.partition(" -> ")
    attr = where.rsplit(".", 1)[-1] if "." in where else where
    return attr.strip() or "handle", kind.strip() or "handle"


@rule("FORK_UNSAFE_HANDLE", kind="doctor")
def fork_unsafe_handle(inp: DoctorInput) -> Finding | None:
    """The dataset holds an open handle that forked workers inherit and share."""
    handles: list[str] = []
    loader_with: LoaderInfo | None = None
    for loader in inp.record.config.loaders:
        # The capture lists handles only for loaders whose workers are forked from this process.
        if loader.num_workers > 0 and loader.fork_unsafe_handles:
            handles.extend(loader.fork_unsafe_handles)
            loader_with = loader_with or loader
    if loader_with is None:
        return None
    attr, kind = _parse_handle(handles[0])
    opener = _OPENERS.get(kind, 'open(self.path, "rb")')
    fix = f"""class {loader_with.dataset_type}(Dataset):
    def __init__(self, path):
        self.path = path
        self.{attr} = None  # opened in each worker, never shared across a fork

    def __getitem__(self, index):
        if self.{attr} is None:
            self.{attr} = {opener}
        ..."""
    return make_finding(
        "FORK_UNSAFE_HANDLE",
        1.0,
        f"{len(handles)} open handle(s) in the dataset are shared by {loader_with.num_workers} forked workers: {handles[0]}",
        {
            "handles": handles,
            "num_workers": loader_with.num_workers,
            "start_method": loader_with.multiprocessing_context or "fork",
            "dataset_type": loader_with.dataset_type,
        },
        fix,
        explanation=(
            "A forked worker inherits the parent's open descriptors: all workers then share one file "
            "offset (a seek in one moves the others' reads) or one HDF5/LMDB/SQLite library state, "
            "which those libraries do not support across fork. The result is wrong samples without an "
            "error, or a crash. About correctness, not speed: est_speedup 1.0."
        ),
        severity="critical",
    )
