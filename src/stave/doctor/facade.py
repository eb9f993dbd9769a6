"""The doctor's facade: validated options and a target in, a :class:`DoctorResult` out.

One way through the house (the pattern of the trace side's :mod:`stave.trace.analysis`): a
:class:`Doctor` measures a target under a :class:`~stave.capture.session.DoctorSession`
(capture, monitor, measure), then :func:`diagnose` analyzes and diagnoses the records and folds
in the profiler trace when one was captured; :func:`merged_result` diagnoses the records of a
distributed run together. ``stave doctor`` (:mod:`stave.cli.doctor`),
``stave.watch()`` (:mod:`stave.api`) and each distributed rank
(:mod:`stave.doctor.rank`) all go through here; the CLI only parses, calls and renders.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from stave.capture.runner import Outcome, Target, run_target
from stave.capture.session import DoctorOptions, DoctorSession, StopRun
from stave.analyze.breakdown import StepSummary
from stave.dist.merge import Collected
from stave.doctor.diagnosis import diagnose_records
from stave.doctor.result import DoctorResult, RankSummary
from stave.doctor.trace_fold import fold_trace
from stave.measure.record import RunInfo, RunRecord

__all__ = ["Doctor", "DoctorOptions", "StopRun", "Target", "diagnose", "merged_result", "run_info_for"]


def run_info_for(target: Target) -> RunInfo:
    """The run info of a doctor run of ``target`` (script or module, and its arguments)."""
    return RunInfo(script=target.name, args=list(target.args), module=target.module)


def diagnose(records: Sequence[RunRecord], statuses: Sequence[str | None] | None = None,
             trace_path: str | None = None) -> DoctorResult:
    """Analyze and diagnose the records (one, or one per rank); fold in the profiler trace at ``trace_path``."""
    result = diagnose_records(records, statuses)
    if trace_path:
        fold_trace(result, trace_path)
    return result


def merged_result(got: Collected) -> DoctorResult:
    """Diagnose the records a distributed run left (:func:`stave.dist.merge.collect`) together;
    missing ranks appear as rows with no measurements."""
    result = diagnose(got.records, got.statuses)
    for rank in got.missing:
        result.ranks.append(RankSummary(rank=rank, hostname="", pid=0, status="missing", summary=StepSummary()))
    result.ranks.sort(key=lambda r: r.rank)
    result.notes.extend(n for n in got.notes if n not in result.notes)
    return result


class Doctor:
    """One doctor run: measure (:meth:`start`/:meth:`stop`, or :meth:`run` a target), then :meth:`result`.

    ``attachments`` are extra instruments the session installs (a distributed rank's DistHooks);
    ``on_step(index, session)`` is called at each step end (the CLI's progress line).
    """

    def __init__(self, options: DoctorOptions, run: RunInfo | None = None,
                 on_step: Callable[[int, Any], None] | None = None, attachments: Sequence[Any] = ()) -> None:
        self.options = options
        self.session = DoctorSession(options, run, on_step=on_step, attachments=attachments)
        self.record: RunRecord | None = None
        self._result: DoctorResult | None = None

    @property
    def run_info(self) -> RunInfo:
        """The run info the record will carry (set the ending on it before :meth:`stop`)."""
        return self.session.run

    @property
    def profile_trace_path(self) -> str | None:
        """The torch.profiler trace captured with ``profile_steps``, once stopped."""
        return self.session.profile_trace_path

    def start(self) -> None:
        """Install the hooks and start the monitor."""
        self.session.start()

    def stop(self, outcome: Outcome | None = None) -> RunRecord:
        """Note how the target ended (if given), remove every hook and return the record."""
        if outcome is not None:
            self.run_info.script_exit_code = outcome.exit_code
            self.run_info.stopped_by = outcome.stopped_by
            self.run_info.error = outcome.error
        self.record = self.session.stop()
        return self.record

    def run(self, target: Target) -> Outcome:
        """Run ``target`` in this process under the doctor; the record is :attr:`record` afterwards.

        Whatever happened in the script, what was measured is kept (and Ctrl-C during the wrap-up
        still leaves hooks removed and workers stopped).
        """
        outcome = Outcome(1, "error", "the doctor stopped before the script ran")
        self.start()
        try:
            outcome = run_target(target, StopRun)
        finally:
            self.stop(outcome)
        return outcome

    def result(self) -> DoctorResult:
        """The diagnosis of the record (the profiler trace folded in), computed once."""
        if self.record is None:
            raise RuntimeError("Doctor.result() needs a finished run: call run() or start()/stop() first")
        if self._result is None:
            self._result = diagnose([self.record], trace_path=self.profile_trace_path)
        return self._result
