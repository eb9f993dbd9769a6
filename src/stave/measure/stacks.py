"""Python stack samples of the main thread, interned so a long run stays small."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable


@dataclass(frozen=True)
class FrameKey:
    """One frame: where the code is, and whether it is the user's own code (not a library, not stave)."""

    file: str
    line: int
    function: str
    user: bool


@dataclass
class StackProfile:
    """Sampled stacks of the main thread.

    ``frames`` interns each distinct frame; ``stacks`` interns each distinct stack as frame ids
    (outermost first); ``samples`` holds one ``[t_ns, step, phase, stack_id]`` row per sample.
    """

    interval_ns: int = 0
    frames: list[FrameKey] = field(default_factory=list)
    stacks: list[list[int]] = field(default_factory=list)
    samples: list[list] = field(default_factory=list)

    def sample_count(self, steps: Iterable[int] | None = None, phase: str | None = None) -> int:
        """Number of samples, optionally only within ``steps`` and/or ``phase``."""
        wanted = set(steps) if steps is not None else None
        return sum(
            1
            for _t, step, ph, _sid in self.samples
            if (wanted is None or step in wanted) and (phase is None or ph == phase)
        )

    def line_counts(
        self,
        steps: Iterable[int] | None = None,
        phase: str | None = None,
        user_only: bool = True,
    ) -> Counter[FrameKey]:
        """How many samples had each line as the innermost frame (of user code when ``user_only``).

        With ``user_only`` the innermost user frame is taken, so time inside torch is charged to
        the user's line that called it: the line to change.
        """
        wanted = set(steps) if steps is not None else None
        counts: Counter[FrameKey] = Counter()
        for _t, step, ph, sid in self.samples:
            if wanted is not None and step not in wanted:
                continue
            if phase is not None and ph != phase:
                continue
            frame = self._innermost(sid, user_only)
            if frame is not None:
                counts[frame] += 1
        return counts

    def collapsed(self) -> Counter[str]:
        """Stacks in the collapsed format of flamegraph.pl and speedscope: ``a;b;c count``."""
        counts: Counter[str] = Counter()
        for _t, _step, _ph, sid in self.samples:
            names = [self._frame_label(fid) for fid in self.stacks[sid]]
            counts[";".join(names) if names else "<idle>"] += 1
        return counts

    def innermost(self, stack_id: int, user_only: bool = True) -> FrameKey | None:
        """The innermost frame of a stack (of the user's own code when ``user_only``), or None."""
        return self._innermost(stack_id, user_only)

    def _innermost(self, stack_id: int, user_only: bool) -> FrameKey | None:
        frame_ids = self.stacks[stack_id]
        for fid in reversed(frame_ids):
            frame = self.frames[fid]
            if frame.user or not user_only:
                return frame
        return None

    def _frame_label(self, frame_id: int) -> str:
        frame = self.frames[frame_id]
        short = frame.file.rsplit("/", 1)[-1]
        # ';' separates frames in the collapsed format, so it must not appear inside a label.
        return f"{frame.function} ({short}:{frame.line})".replace(";", ",")
