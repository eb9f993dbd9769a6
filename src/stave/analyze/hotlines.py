"""The user's source lines where the main thread spent its time, from the stack samples.

Each sample charges its time to the innermost frame of the user's own code, so time spent inside
torch is charged to the line of the script that called it: the line to change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from stave.measure.record import RunRecord
from stave.measure.stacks import StackProfile

# A top-lines table longer than this is a profile dump, not a pointer to the line to change.
REPORT_LINES_LIMIT = 15


@dataclass(frozen=True)
class HotLine:
    """One user source line and the samples charged to it (``share``: of the selected samples)."""

    file: str
    line: int
    function: str
    samples: int
    share: float

    @property
    def label(self) -> str:
        """``path:line`` as editors and tracebacks write it."""
        return f"{self.file}:{self.line}"


def hot_lines(
    profile: StackProfile,
    steps: Iterable[int] | None = None,
    phase: str | None = None,
    limit: int = 5,
) -> list[HotLine]:
    """The ``limit`` user lines with most samples within ``steps`` / ``phase``, most first.

    ``share`` is over all selected samples, including those with no user frame (time in the
    interpreter's or a library's own threads of control), so shares do not overstate a line.
    """
    wanted = list(steps) if steps is not None else None
    total = profile.sample_count(wanted, phase)
    if total == 0:
        return []
    counts = profile.line_counts(wanted, phase)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0].file, kv[0].line))
    return [
        HotLine(frame.file, frame.line, frame.function, n, n / total) for frame, n in ranked[:limit]
    ]


def seconds_at_lines(
    profile: StackProfile,
    lines: set[tuple[str, int]],
    steps: Iterable[int] | None = None,
) -> float:
    """Seconds the sampler saw the main thread at any of ``lines`` (file, line), innermost user frame."""
    if profile.interval_ns <= 0:
        return 0.0
    counts = profile.line_counts(list(steps) if steps is not None else None)
    n = sum(c for frame, c in counts.items() if (frame.file, frame.line) in lines)
    return n * profile.interval_ns / 1e9


def stack_window(record: RunRecord) -> tuple[set[int] | None, str]:
    """Which steps the stack statistics cover: the counted steps (``"counted_steps"``), or the
    whole run (``None``, ``"run"``) if none of the counted steps has samples."""
    counted = {s.index for s in record.counted_steps()}
    if counted and any(row[1] in counted for row in record.stacks.samples):
        return counted, "counted_steps"
    return None, "run"
