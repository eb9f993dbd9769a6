"""``stave.watch()``: the doctor as a context manager around your own loop.

    with stave.watch() as run:
        for x, y in loader:
            ...
            optimizer.step()
    run.report()

The block is the doctor's target: :class:`~stave.doctor.facade.Doctor` measures it, as it measures
a script for ``stave doctor``, and diagnoses it the same way (the profiler trace folded in).
Like the CLI, this module is an entry point: it calls the facade and renders (report/).
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from stave.doctor.facade import Doctor, DoctorOptions, StopRun
from stave.doctor.result import DoctorResult
from stave.measure.record import RunInfo, RunRecord


class Watch:
    """Measures the training steps run inside the ``with`` block."""

    def __init__(self, steps: int | None = None, warmup: int | None = None, probes: bool = True) -> None:
        self.doctor = Doctor(DoctorOptions(steps=steps, warmup=warmup, probes=probes), RunInfo(script="<stave.watch>"))
        self.record: RunRecord | None = None

    @property
    def session(self) -> Any:
        """The doctor's measuring session (hooks, monitor) while the block runs."""
        return self.doctor.session

    def __enter__(self) -> "Watch":
        self.doctor.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        stopped = exc_type is not None and issubclass(exc_type, StopRun)
        run = self.doctor.run_info
        if exc_type is None or stopped:
            run.stopped_by = "steps" if stopped else "end"
        elif issubclass(exc_type, KeyboardInterrupt):
            run.stopped_by = "interrupt"
        else:
            run.stopped_by = "error"
            run.error = f"{exc_type.__name__}: {exc}"
        self.record = self.doctor.stop()
        # Reaching `steps` ends the block early on purpose: swallow only that.
        return stopped

    def result(self) -> DoctorResult:
        """The diagnosis (a :class:`stave.doctor.result.DoctorResult`), computed once by the doctor."""
        if self.record is None:
            raise RuntimeError("run.result()/report() must be called after the `with stave.watch()` block")
        return self.doctor.result()

    def report(self, json: str | None = None, html: str | None = None, quiet: bool = False) -> Any:
        """Print the terminal report (unless ``quiet``), write the files asked for, return the result."""
        # Imported when a report is asked for: the renderers (rich, matplotlib) stay out of the
        # user's training process until then.
        from stave.report.show import show_and_write

        result = self.result()
        show_and_write(result, json_path=json, html_path=html, quiet=quiet)
        return result


def watch(steps: int | None = None, warmup: int | None = None, probes: bool = True) -> Watch:
    """Measure the training loop inside a ``with`` block; ``steps`` stops it after N optimizer steps."""
    return Watch(steps=steps, warmup=warmup, probes=probes)
