"""What a rank measures beyond the single-process doctor, as an attachment of the DoctorSession.

The session calls ``install(session)`` when it starts, ``uninstall()`` when the script is over and
``contribute(record, final)`` on every record it builds (the periodic ones included), which fills
``record.dist`` and, on the final record, the collective waits still outstanding.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from stave.dist.comm import CommTimer, DDPPatches
from stave.dist.env import DistEnv
from stave.dist.sampler import IndexRecorder
from stave.measure.config import LoaderInfo
from stave.measure.dist import DistInfo
from stave.measure.record import RunRecord


class DistHooks:
    """DDP communication timing, unused-parameter search timing and sampler index recording."""

    def __init__(self, env: DistEnv, record_interval_s: float | None = None) -> None:
        self.info = DistInfo(
            run_id=env.run_id,
            launch_id=env.launch_id,
            world_size=env.world_size,
            node_rank=env.node_rank,
            restart_count=env.restart_count,
            record_interval_s=record_interval_s,
        )
        self.timer: CommTimer | None = None
        self._patches: DDPPatches | None = None
        self._recorder: IndexRecorder | None = None
        self._session: Any = None

    def install(self, session: Any) -> None:
        """Start measuring: patch DDP and the DataLoader's sampler access."""
        self._session = session
        self.timer = CommTimer(session.clock, self.info)
        self._patches = DDPPatches(self.timer)
        self._patches.install()
        self._recorder = IndexRecorder(self._loader_info)
        self._recorder.install()

    def _loader_info(self, loader: Any) -> LoaderInfo | None:
        loader_id = getattr(loader, "_stave_loader_id", None)
        if loader_id is None or self._session is None:
            return None
        info: LoaderInfo | None = self._session.loader.loaders.get(loader_id)
        return info

    def uninstall(self) -> None:
        """Stop measuring and restore what was patched."""
        if self.timer is not None:
            self.timer.active = False
        if self._patches is not None:
            self._patches.uninstall()
        if self._recorder is not None:
            self._recorder.uninstall()

    def contribute(self, record: RunRecord, final: bool) -> None:
        """Fill ``record.dist`` (a copy); on the final record, settle the outstanding comm waits."""
        self.info.backend = self.info.backend or _backend()
        if self.timer is not None:
            if final:
                # The session synchronized the device before building the final record.
                self.timer.resolve(final=True)
            self.timer.assign(record.steps)
        record.run.world_size = self.info.world_size
        record.dist = dataclasses.replace(
            self.info,
            rounds_by_step=list(self.info.rounds_by_step),
            find_unused_ns_by_step=list(self.info.find_unused_ns_by_step),
        )
        if not final and self._session is not None:
            # The session attaches its loaders to the config only at the end; a periodic record
            # needs them for the sample-index comparison if this rank never gets there.
            record.config = dataclasses.replace(record.config, loaders=list(self._session.loader.loaders.values()))


def _backend() -> str | None:
    """The default process group's backend, once the script has created it."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return str(dist.get_backend())
    return None
