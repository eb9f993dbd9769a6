"""Analyse a set of traces (one per rank, or files and directories) and find what to fix.

:func:`analyze_paths` is the entry point of ``stave trace`` and of ``stave doctor --profile-steps``:
it expands directories, reads every trace (files named on the command line must be good; a bad file
found inside a directory is skipped and reported), and reduces each rank to a
:class:`~stave.measure.ranks.RankTiming`. :func:`trace_findings` runs the trace rules on each rank
and the rank rules across ranks.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from stave.diagnose.engine import run_rules
from stave.diagnose.finding import Finding, rank_findings
from stave.errors import InputError, StaveError
from stave.measure.ranks import RankTiming
from stave.trace.analysis import TraceAnalysis, analyze_trace
from stave.trace.ranks import rank_timing

log = logging.getLogger(__name__)

TRACE_SUFFIXES = (".json", ".json.gz")


@dataclass
class SkippedFile:
    """A file in a directory that could not be analysed, and why (one line)."""

    path: str
    reason: str


@dataclass
class TraceReport:
    """All analysed traces, the files skipped, the per-rank records and the findings."""

    traces: list[TraceAnalysis]
    skipped: list[SkippedFile] = field(default_factory=list)
    rank_timings: list[RankTiming] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def multi_rank(self) -> bool:
        """True when several distinct ranks were analysed."""
        return len({t.rank for t in self.traces}) > 1


def expand_inputs(paths: Iterable[str | Path]) -> list[tuple[Path, bool]]:
    """(file, named explicitly) for each input; a directory contributes its trace files, sorted."""
    out: list[tuple[Path, bool]] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(TRACE_SUFFIXES))
            if not files:
                raise InputError(f"{p}: no trace files (*.json, *.json.gz) in this directory")
            out.extend((f, False) for f in files)
        elif p.is_file():
            out.append((p, True))
        elif p.exists():
            raise InputError(f"{p}: not a regular file or directory")
        else:
            raise InputError(f"{p}: no such file or directory")
    if not out:
        raise InputError("no trace given: pass trace files (.json, .json.gz) or directories")
    return out


def analyze_paths(
    paths: Iterable[str | Path],
    progress: Callable[[int, int, Path], None] | None = None,
) -> TraceReport:
    """Analyse traces (files and directories); see the module docstring for the error policy."""
    inputs = expand_inputs(paths)
    traces: list[TraceAnalysis] = []
    skipped: list[SkippedFile] = []
    for i, (path, explicit) in enumerate(inputs):
        if progress is not None:
            progress(i, len(inputs), path)
        try:
            traces.append(analyze_trace(path, order=i))
        except StaveError as exc:
            if explicit:
                raise
            log.warning("skipped %s: %s", path, exc)
            skipped.append(SkippedFile(str(path), str(exc)))
    if not traces:
        reasons = "; ".join(s.reason for s in skipped)
        raise InputError(f"no readable trace among {len(inputs)} files: {reasons}")
    report = TraceReport(traces=traces, skipped=skipped)
    ranks = [t.rank for t in traces]
    if len(set(ranks)) != len(ranks):
        report.notes.append(
            "several traces have the same rank (repeated profiling cycles?): the rank comparison "
            "is left out; pass one trace per rank to compare ranks"
        )
    else:
        report.rank_timings = [rank_timing(t) for t in sorted(traces, key=lambda t: t.rank)]
    report.findings = trace_findings(report)
    return report


def trace_findings(report: TraceReport, notes: list[str] | None = None) -> list[Finding]:
    """Trace rules per rank (one finding per ID, from the rank where it matters most) + rank rules."""
    notes = report.notes if notes is None else notes
    best: dict[str, tuple[Finding, list[int]]] = {}
    multi = report.multi_rank
    for t in report.traces:
        for f in run_rules("trace", t, notes):
            f = dataclasses.replace(f, source="trace", rank=t.rank if multi else None)
            prev = best.get(f.id)
            if prev is None:
                best[f.id] = (f, [t.rank])
            else:
                keep = f if f.est_speedup > prev[0].est_speedup else prev[0]
                best[f.id] = (keep, prev[1] + [t.rank])
    findings = []
    for f, ranks in best.values():
        if len(ranks) > 1:
            f = dataclasses.replace(f, evidence={**f.evidence, "ranks_with_finding": sorted(ranks)})
        findings.append(f)
    if len(report.rank_timings) > 1:
        findings.extend(
            dataclasses.replace(f, source="trace") for f in run_rules("ranks", report.rank_timings, notes)
        )
    return rank_findings(findings)
