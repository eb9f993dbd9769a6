"""A step clock for the capture tests: 1 ms per reading, so every duration is exact."""

from __future__ import annotations

import itertools

from stave.device import Mark


class FakeClock:
    """A clock that advances 1 ms per reading, so every duration is exact."""

    use_events = False

    def __init__(self) -> None:
        self._t = itertools.count(0, 1_000_000)

    def mark(self) -> Mark:
        return Mark(next(self._t))

    @staticmethod
    def ready(mark: Mark) -> bool:
        return True

    @staticmethod
    def elapsed_ns(start: Mark, end: Mark) -> int:
        return end.host_ns - start.host_ns
