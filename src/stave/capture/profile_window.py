"""Record a torch.profiler trace of N training steps (used by ``stave doctor --profile-steps N``).

The doctor calls :meth:`ProfileWindow.start` after warm-up, :meth:`ProfileWindow.step` at each
optimizer-step boundary (which closes a ``ProfilerStep#N`` span), and :meth:`ProfileWindow.stop`
after N steps; ``stop`` exports the trace and returns its path. CPU activity is always recorded,
CUDA activity when a GPU is present; shapes and Python stacks are on so that sync calls can be
traced back to the source line that issued them. The profiled steps are slower than normal ones,
so the doctor leaves them out of its own statistics.
"""

from __future__ import annotations

import logging
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

from stave import device

log = logging.getLogger(__name__)

TRACE_FILE_NAME = "profile.pt.trace.json.gz"


class ProfileWindow:
    """A torch.profiler session over ``steps`` steps, written to ``out_dir``."""

    def __init__(self, out_dir: str | os.PathLike[str], steps: int, profile_memory: bool = False) -> None:
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        self.out_dir = Path(out_dir)
        self.steps = steps
        self.profile_memory = profile_memory
        self.steps_seen = 0
        self._prof: Any = None
        self._path: Path | None = None

    @property
    def active(self) -> bool:
        """True between a successful :meth:`start` and :meth:`stop`."""
        return self._prof is not None

    def start(self) -> None:
        """Start recording (a failure to start is logged; the run goes on without a trace)."""
        import torch.profiler as tp

        activities = [tp.ProfilerActivity.CPU]
        if device.cuda_available():
            activities.append(tp.ProfilerActivity.CUDA)
        with warnings.catch_warnings():
            # The doctor's steps are already past warm-up; torch's advice to add one is noise here.
            warnings.filterwarnings("ignore", message=".*warmup.*")
            prof = tp.profile(
                activities=activities,
                # A schedule is what makes torch.profiler mark ProfilerStep#N spans.
                schedule=tp.schedule(wait=0, warmup=0, active=self.steps, repeat=1),
                on_trace_ready=self._export,
                record_shapes=True,
                with_stack=True,
                profile_memory=self.profile_memory,
            )
        try:
            prof.start()
        except RuntimeError as exc:
            # Another profiler (the user's own) may already be running in this process.
            log.warning("could not start torch.profiler (%s); no trace will be analysed", exc)
            return
        self._prof = prof

    def step(self) -> None:
        """Mark a step boundary (closes the current ``ProfilerStep#N`` span)."""
        if self._prof is None:
            return
        self._prof.step()
        self.steps_seen += 1

    def stop(self) -> Path | None:
        """Stop recording and export the trace; returns its path, or None when nothing was recorded."""
        prof, self._prof = self._prof, None
        if prof is not None:
            # Exports through _export unless the schedule already did after the last step.
            prof.stop()
        path, self._path = self._path, None
        return path

    def _export(self, prof: Any) -> None:
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            # Exported under a temporary name and renamed, so no reader sees half a trace.
            fd, tmp = tempfile.mkstemp(prefix=".profile.", suffix=".pt.trace.json.gz", dir=self.out_dir)
            os.close(fd)
            prof.export_chrome_trace(tmp)
            target = self.out_dir / TRACE_FILE_NAME
            os.replace(tmp, target)
        except (OSError, RuntimeError) as exc:
            log.warning("could not write the profiler trace to %s: %s", self.out_dir, exc)
            return
        self._path = target
