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


def library_share(profile: StackProfile, frame_file: str, frame_line: int,
                  steps: Iterable[int] | None = None, phase: str | None = None) -> float:
    """Of the samples charged to the user line ``file:line``, the share spent inside library code.

    A sample is inside a library when its innermost frame (any frame) is not the user's: the line
    called into torch or another package and the time went there, not to the line's own Python.
    """
    wanted = set(steps) if steps is not None else None
    at_line = inside = 0
    for _t, step, ph, sid in profile.samples:
        if (wanted is not None and step not in wanted) or (phase is not None and ph != phase):
            continue
        user = profile.innermost(sid, True)
        if user is None or user.file != frame_file or user.line != frame_line:
            continue
        at_line += 1
        innermost = profile.innermost(sid, False)
        inside += innermost is not None and not innermost.user
    return inside / at_line if at_line else 0.0


# How far above a hot line to look for the block that encloses it, and how far into a loop's body
# to look for the training step's own calls.
LOOP_LOOKBACK_LINES = 12
LOOP_BODY_LINES = 80
# Calls that make a loop the training loop itself (every line of a step sits inside it).
TRAINING_LOOP_MARKS = ("backward(", ".step(")


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip())


def source_context(file: str, line: int) -> tuple[str, bool]:
    """The source text of ``file:line`` (stripped; "" when unreadable) and whether its enclosing
    block is a ``for``/``while`` loop other than the training loop (one whose body calls
    ``backward()`` or ``.step()``): a per-element loop inside the step."""
    import linecache

    text = linecache.getline(file, line)
    if not text.strip():
        return "", False
    stripped = text.strip()
    header_line = line if stripped.startswith(("for ", "while ")) else None
    if header_line is None:
        indent = _indent(text)
        for above in range(line - 1, max(0, line - LOOP_LOOKBACK_LINES) - 1, -1):
            prev = linecache.getline(file, above)
            if prev.strip() and _indent(prev) < indent:
                if prev.strip().startswith(("for ", "while ")):
                    header_line = above
                break
    if header_line is None:
        return stripped, False
    header_indent = _indent(linecache.getline(file, header_line))
    for below in range(header_line + 1, header_line + LOOP_BODY_LINES):
        body = linecache.getline(file, below)
        if not body:
            break
        if body.strip() and _indent(body) <= header_indent:
            break
        if any(mark in body for mark in TRAINING_LOOP_MARKS):
            return stripped, False
    return stripped, True


def loop_holds_phase(profile: StackProfile, steps: Iterable[int] | None, phase: str, min_line_share: float) -> bool:
    """True when most of ``phase``'s samples sit on user lines inside a per-element loop.

    Lines below ``min_line_share`` are noise and do not count; "most" is over all of the phase's
    samples, so a loop that holds a minority of the time does not speak for the phase.
    """
    lines = [h for h in hot_lines(profile, steps, phase, limit=5) if h.share >= min_line_share]
    in_loop = sum(h.share for h in lines if source_context(h.file, h.line)[1])
    return in_loop > 0.5

