"""Hooks on ``torch.utils.data.DataLoader``: data wait, samples per step, worker start-up, workers.

``DataLoader.__iter__`` (which starts the workers of a new epoch unless they persist) and every
iterator's ``__next__`` are timed as data wait. A new iterator gets the doctor's
``worker_init_fn`` wrapper so each worker reports its per-stage timings; the user's own
``worker_init_fn`` still runs, after it.
"""

from __future__ import annotations

import functools
import logging
import time
import weakref
from typing import Any, Callable

from torch.utils.data import dataloader as dl

from stave.capture import config_probe, loader_stats
from stave.capture.steps import StepTracker
from stave.measure.config import LoaderInfo, TensorInfo

log = logging.getLogger(__name__)


class LoaderHooks:
    """Installs the DataLoader hooks and keeps what they learn."""

    def __init__(self, tracker: StepTracker, stats_dir: str, on_batch: Callable[[list[TensorInfo]], None]) -> None:
        self.tracker = tracker
        self.stats_dir = stats_dir
        self.on_batch = on_batch
        self.loaders: dict[int, LoaderInfo] = {}
        self._loader_refs: dict[int, Any] = {}
        self._iterators: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._seen_iterators: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._originals: dict[str, Any] = {}
        self._batch_seen = False

    def _info_for(self, loader: Any) -> LoaderInfo:
        key = id(loader)
        ref = self._loader_refs.get(key)
        if ref is None or ref() is not loader:
            info = config_probe.loader_info(loader, loader_id=len(self.loaders))
            self.loaders[info.loader_id] = info
            self._loader_refs[key] = weakref.ref(loader)
            loader._stave_loader_id = info.loader_id
        return self.loaders[loader._stave_loader_id]

    def _iter(self, loader: Any) -> Any:
        owned = self.tracker.enter("data_wait")
        started_ns = time.perf_counter_ns()
        try:
            info = self._info_for(loader)
            user_init = loader.worker_init_fn
            wrap = loader.num_workers > 0 and not isinstance(user_init, loader_stats.WorkerInit)
            if wrap:
                loader.worker_init_fn = loader_stats.WorkerInit(user_init, self.stats_dir, info.loader_id)
            try:
                iterator = self._originals["iter"](loader)
            finally:
                if wrap:
                    loader.worker_init_fn = user_init
            if iterator not in self._seen_iterators:
                self._seen_iterators.add(iterator)
                info.iterators_created += 1
            if isinstance(iterator, dl._MultiProcessingDataLoaderIter):
                self._iterators.add(iterator)
            iterator._stave_loader_id = info.loader_id
            iterator._stave_epoch_start_ns = started_ns
            iterator._stave_first_pending = True
            return iterator
        finally:
            self.tracker.exit(owned)

    def _next(self, iterator: Any) -> Any:
        owned = self.tracker.enter("data_wait")
        try:
            batch = self._originals["next"](iterator)
            loader_id = getattr(iterator, "_stave_loader_id", None)
            info = self.loaders.get(loader_id) if loader_id is not None else None
            fallback = info.batch_size if info is not None else None
            self.tracker.add_to_active(samples=config_probe.batch_samples(batch, fallback))
            if info is not None:
                info.batches += 1
                if getattr(iterator, "_stave_first_pending", False):
                    iterator._stave_first_pending = False
                    info.first_batch_wait_ns.append(time.perf_counter_ns() - iterator._stave_epoch_start_ns)
            if not self._batch_seen:
                self._batch_seen = True
                self.on_batch(config_probe.batch_tensors(batch))
            return batch
        finally:
            self.tracker.exit(owned)

    def worker_pids(self) -> list[int]:
        """PIDs of the loader workers started so far (for the monitor, which drops exited ones).

        Called from the sampler thread: ``Process.is_alive()`` would reap the child there and race
        the DataLoader's own shutdown, so no liveness check is made here.
        """
        pids: list[int] = []
        for iterator in list(self._iterators):
            for proc in getattr(iterator, "_workers", []) or []:
                if proc.pid is not None:
                    pids.append(proc.pid)
        return pids

    def shutdown_workers(self) -> None:
        """Stop every worker we saw started (``--steps`` reached, Ctrl-C, a crash): none left behind."""
        for iterator in list(self._iterators):
            try:
                iterator._shutdown_workers()
            except (OSError, RuntimeError, AttributeError) as exc:
                log.debug("shutting down loader workers: %s", exc)

    def install(self) -> None:
        """Patch ``DataLoader.__iter__`` and ``_BaseDataLoaderIter.__next__``, and the fetchers."""
        self._originals["iter"] = dl.DataLoader.__iter__
        self._originals["next"] = dl._BaseDataLoaderIter.__next__
        hooks = self

        @functools.wraps(self._originals["iter"])
        def iter_wrapper(loader: Any) -> Any:
            return hooks._iter(loader)

        @functools.wraps(self._originals["next"])
        def next_wrapper(iterator: Any) -> Any:
            return hooks._next(iterator)

        dl.DataLoader.__iter__ = iter_wrapper
        dl._BaseDataLoaderIter.__next__ = next_wrapper
        loader_stats.install()
        loader_stats.set_current(loader_stats.LoaderStats(worker_id=-1, loader_id=0, out_path=None))

    def uninstall(self) -> None:
        """Restore the originals."""
        if not self._originals:
            return
        dl.DataLoader.__iter__ = self._originals.pop("iter")
        dl._BaseDataLoaderIter.__next__ = self._originals.pop("next")
        loader_stats.uninstall()

    def main_process_stats(self) -> loader_stats.LoaderStats | None:
        """Stage timings of loading done in the main process (``num_workers=0``)."""
        return loader_stats.current()


def is_torch_loader_iterator(obj: Any) -> bool:
    """True for iterators of torch DataLoaders."""
    return isinstance(obj, dl._BaseDataLoaderIter)

