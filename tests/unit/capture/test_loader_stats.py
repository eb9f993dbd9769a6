"""Loader instrumentation: same batches as torch's fetchers, per-stage times, worker files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, IterableDataset
from torchvision import transforms

from stave.capture import loader_stats
from stave.capture.loader_stats import LoaderStats, WorkerInit, read_worker_files


class FileImages(Dataset):
    """Reads small PNG files from disk and applies a Compose: a miniature ImageFolder."""

    def __init__(self, root: Path, n: int) -> None:
        self.paths = []
        rng = np.random.default_rng(0)
        for i in range(n):
            p = root / f"{i}.png"
            Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(p)
            self.paths.append(p)
        self.transform = transforms.Compose([transforms.Resize(8), transforms.ToTensor()])

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        with Image.open(self.paths[i]) as img:
            return self.transform(img.convert("RGB")), i


class Counting(IterableDataset):
    def __iter__(self):
        return iter(range(10))


@pytest.fixture
def instrumented():
    loader_stats.install()
    stats = LoaderStats(-1, 0, None)
    loader_stats.set_current(stats)
    try:
        yield stats
    finally:
        loader_stats.set_current(None)
        loader_stats.uninstall()


def test_same_batches_and_stages(tmp_path: Path, instrumented: LoaderStats) -> None:
    ds = FileImages(tmp_path, 12)
    batches = list(DataLoader(ds, batch_size=4))
    loader_stats.uninstall()
    plain = list(DataLoader(ds, batch_size=4))
    loader_stats.install()
    for a, b in zip(batches, plain):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    names = {s.name for s in instrumented.stages.values()}
    assert {"load", "Resize", "ToTensor", "collate"} <= names
    assert instrumented.samples == 12 and instrumented.batches == 3
    assert instrumented.opens == 12  # one open() per file: the many-small-files signature
    for st in instrumented.stages.values():
        assert st.cpu_ns <= st.wall_ns * 1.5 + 5_000_000
    if instrumented.read_calls is not None:
        assert instrumented.read_calls >= 12


def test_iterable_dataset_semantics(instrumented: LoaderStats) -> None:
    got = [b.tolist() for b in DataLoader(Counting(), batch_size=4)]
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    got = [b.tolist() for b in DataLoader(Counting(), batch_size=4, drop_last=True)]
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert instrumented.samples == 20


def test_a_batch_of_samples_is_timed_as_one_span(instrumented: LoaderStats, monkeypatch) -> None:
    # The stages keep sums, so the clocks are read per batch, not per sample: a thread-CPU read is a
    # system call, and per sample it cost about as much as a small sample's own fetch.
    reads = []
    real = loader_stats.time.thread_time_ns

    def counting() -> int:
        reads.append(1)
        return real()

    monkeypatch.setattr(loader_stats.time, "thread_time_ns", counting)
    ds = torch.utils.data.TensorDataset(torch.arange(64.0).view(32, 2))
    for loader in (DataLoader(ds, batch_size=16), DataLoader(Counting(), batch_size=5)):
        reads.clear()
        batches = list(loader)
        # getitems and collate, two reads each a fetch (an iterable loader fetches once more to end)
        assert reads and len(reads) <= 4 * (len(batches) + 1)
    load = instrumented.stages["load"]
    assert load.samples == 32 + 10 and instrumented.samples == 42


@pytest.mark.parametrize("method", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_workers_write_their_stats(tmp_path: Path, method: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    ds = FileImages(data, 8)
    stats_dir = tmp_path / "stats"
    stats_dir.mkdir()
    loader = DataLoader(ds, batch_size=2, num_workers=2, multiprocessing_context=method,
                        worker_init_fn=WorkerInit(None, str(stats_dir), 0))
    assert sum(len(b[1]) for b in loader) == 8
    workers = read_worker_files(str(stats_dir))
    assert sorted(w.worker_id for w in workers) == [0, 1]
    assert sum(w.samples for w in workers) == 8
    assert all(w.pid != os.getpid() for w in workers)
    assert all(any(s.name == "Resize" for s in w.stages) for w in workers)


def test_the_first_batch_is_kept_apart(tmp_path: Path, instrumented: LoaderStats) -> None:
    ds = FileImages(tmp_path, 12)
    list(DataLoader(ds, batch_size=4))
    assert instrumented.first_batch_samples == 4
    assert 0 < instrumented.first_batch_wall_ns <= sum(s.wall_ns for s in instrumented.stages.values())
    stats = instrumented.to_worker_stats()
    assert stats.first_batch_samples == 4 and stats.first_batch_cpu_ns == instrumented.first_batch_cpu_ns


def test_whole_batch_indexing_counts_the_batch_samples(instrumented: LoaderStats) -> None:
    """batch_size=None with a BatchSampler: one __getitem__ per batch, fetching that batch's samples,
    so the per-sample cost is the call's cost over its samples (a single key still counts one)."""
    from torch.utils.data import BatchSampler, SequentialSampler, TensorDataset

    data = TensorDataset(torch.arange(20.0).reshape(10, 2), torch.arange(10))
    loader = DataLoader(data, batch_size=None, sampler=BatchSampler(SequentialSampler(data), 4, drop_last=False))
    got = [y.tolist() for _x, y in loader]
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert instrumented.samples == 10 and instrumented.batches == 3
    assert instrumented.stages["load"].samples == 10
    single = [int(y) for _x, y in DataLoader(data, batch_size=None)]
    assert single == list(range(10)) and instrumented.samples == 20 and instrumented.batches == 13
    assert loader_stats._index_samples((3, 224)) == 1  # a composite key for one sample
    assert loader_stats._index_samples(torch.arange(5)) == 5 and loader_stats._index_samples(7) == 1


class InMemory(Dataset):
    """Tensors already in memory: fetching them reads no file."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int):
        return torch.full((4,), float(i))


def test_reading_the_counters_is_not_the_datasets_reads(instrumented: LoaderStats) -> None:
    # The doctor's own reads of /proc (the I/O and scheduler counters around each fetch) stay out
    # of the dataset's: an in-memory dataset reads nothing.
    assert len(list(DataLoader(InMemory(), batch_size=8))) == 8
    if instrumented.read_calls is not None:
        assert instrumented.read_calls == 0 and instrumented.read_chars == 0


def test_a_forked_child_reads_its_own_counters() -> None:
    # The counters' descriptors are kept per thread; a forked worker must open its own, not read
    # the parent thread's through the inherited descriptor.
    if loader_stats._io_counters() is None:
        pytest.skip("/proc/thread-self/io is hidden here")
    parent_before = loader_stats._io_counters()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: read a little, then report its own read count
        os.close(r)
        with open(os.devnull, "rb") as fh:
            for _ in range(50):
                fh.read(1)
        counters = loader_stats._io_counters()
        os.write(w, str(counters["syscr"] if counters else -1).encode())
        os._exit(0)
    os.close(w)
    child_reads = int(os.read(r, 64) or b"-1")
    os.close(r)
    os.waitpid(pid, 0)
    parent_after = loader_stats._io_counters()
    # A new process's thread starts its counters at zero: the child sees its own 50 reads (and the
    # counter read itself), not the parent thread's hundreds of import reads.
    assert 50 <= child_reads < 60 < parent_before["syscr"]
    assert parent_after["syscr"] - parent_before["syscr"] < 50


def test_torchvision_is_patched_only_once_the_script_imports_it() -> None:
    # A fresh interpreter: installing must not import torchvision (2.7 s of every doctor run and of
    # every spawned worker's start); the first fetch after the script imports it times Compose.
    code = (
        "import sys\n"
        "from stave.capture import loader_stats\n"
        "from stave.capture.loader_stats import LoaderStats\n"
        "loader_stats.install()\n"
        "assert 'torchvision' not in sys.modules, 'install imported torchvision'\n"
        "stats = LoaderStats(-1, 0, None)\n"
        "loader_stats.set_current(stats)\n"
        "import torch\n"
        "from torch.utils.data import DataLoader\n"
        "from torchvision import transforms\n"
        "t = transforms.Compose([transforms.Lambda(lambda i: torch.full((2,), float(i)))])\n"
        "class DS(torch.utils.data.Dataset):\n"
        "    def __len__(self): return 4\n"
        "    def __getitem__(self, i): return t(i)\n"
        "batches = list(DataLoader(DS(), batch_size=2))\n"
        "assert [b[:, 0].tolist() for b in batches] == [[0.0, 1.0], [2.0, 3.0]]\n"
        "assert 'Lambda' in {s.name for s in stats.stages.values()}, stats.stages\n"
        "loader_stats.uninstall()\n"
        "assert transforms.Compose.__call__.__name__ == '__call__'\n"
    )
    src = str(Path(__file__).resolve().parents[3] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
