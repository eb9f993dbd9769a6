"""The main thread's stack samples as collapsed stacks (``stave doctor --flamegraph``).

One line per distinct stack, ``outermost;...;innermost count``: the input format of
flamegraph.pl and of speedscope (import the file at speedscope.app). Frames read
``function (file.py:line)``. Lines are sorted by count, largest first, then by stack, so the
file is the same for the same samples.
"""

from __future__ import annotations

from stave.measure.stacks import StackProfile


def collapsed_stacks(profile: StackProfile) -> str:
    """The samples of ``profile`` in collapsed-stack format (empty string when there are none)."""
    counts = profile.collapsed()
    lines = [f"{stack} {count}" for stack, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    return "".join(line + "\n" for line in lines)
