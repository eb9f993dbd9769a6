"""``stave.watch()``: the doctor as a context manager around your own loop.

    with stave.watch() as run:
        for x, y in loader:
            ...
            optimizer.step()
    run.report()
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from stave.capture.session import DoctorOptions, DoctorSession, StopRun
from stave.measure.record import RunInfo, RunRecord


class Watch:
    """Measures the training steps run inside the ``with`` block."""

    def __init__(self, steps: int | None = None, warmup: int | None = None, probes: bool = True) -> None:
        self.session = DoctorSession(DoctorOptions(steps=steps, warmup=warmup, probes=probes),
                                     RunInfo(script="<stave.watch>"))
        self.record: RunRecord | None = None
        self._result: Any = None

    def __enter__(self) -> "Watch":
        self.session.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        stopped = exc_type is not None and issubclass(exc_type, StopRun)
        if exc_type is None or stopped:
            self.session.run.stopped_by = "steps" if stopped else "end"
        elif issubclass(exc_type, KeyboardInterrupt):
            self.session.run.stopped_by = "interrupt"
        else:
            self.session.run.stopped_by = "error"
            self.session.run.error = f"{exc_type.__name__}: {exc}"
        self.record = self.session.stop()
        # Reaching `steps` ends the block early on purpose: swallow only that.
        return stopped

    def result(self) -> Any:
        """The diagnosis (a :class:`stave.doctor.result.DoctorResult`), computed once."""
        if self.record is None:
            raise RuntimeError("run.result()/report() must be called after the `with stave.watch()` block")
        if self._result is None:
            from stave.doctor.diagnosis import diagnose_records

            self._result = diagnose_records([self.record])
        return self._result

    def report(self, json: str | None = None, html: str | None = None, quiet: bool = False) -> Any:
        """Print the terminal report (unless ``quiet``), write the files asked for, return the result."""
        from stave.report.show import show_and_write

        result = self.result()
        show_and_write(result, json_path=json, html_path=html, quiet=quiet)
        return result


def watch(steps: int | None = None, warmup: int | None = None, probes: bool = True) -> Watch:
    """Measure the training loop inside a ``with`` block; ``steps`` stops it after N optimizer steps."""
    return Watch(steps=steps, warmup=warmup, probes=probes)
