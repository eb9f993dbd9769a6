"""Write the doctor's report files: JSON, HTML, timeline and flamegraph, each atomically.

The CLI (``stave doctor --json/--html/--timeline/--flamegraph``) and ``stave.watch().report()``
call :func:`write_doctor_outputs`; a path left as ``None`` is not written. Check the paths with
:func:`stave.files.check_writable` before the run, so a typo does not cost the user the run.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from stave.doctor.result import DoctorResult
from stave.files import atomic_write_json, atomic_write_text
from stave.measure.serialize import json_safe
from stave.report.doctor_json import doctor_json
from stave.report.flamegraph import collapsed_stacks
from stave.report.timeline import timeline_json, timeline_json_ranks

log = logging.getLogger(__name__)

PathArg = str | os.PathLike[str] | None


def write_doctor_outputs(
    result: DoctorResult,
    json_path: PathArg = None,
    html_path: PathArg = None,
    timeline_path: PathArg = None,
    flamegraph_path: PathArg = None,
    report: dict[str, Any] | None = None,
) -> list[Path]:
    """Write each requested report file; returns the paths written, in argument order.

    ``report``: the result's ``doctor_json``, when the caller already built it.

    Raises :class:`~stave.errors.OutputError` (one line, exit 2 in the CLI) when a file cannot be
    written; files already written stay complete (each write is atomic).
    """
    written: list[Path] = []
    if report is None and (json_path is not None or html_path is not None):
        report = doctor_json(result)
    if json_path is not None:
        written.append(atomic_write_json(json_path, report))
    if html_path is not None:
        from stave.report.html_doctor import doctor_html  # matplotlib is only imported for HTML

        html_dir = os.path.dirname(os.path.abspath(html_path))  # docs links are relative to the page
        written.append(atomic_write_text(html_path, doctor_html(result, report, html_dir=html_dir)))
    if timeline_path is not None:
        records = result.rank_records if len(result.rank_records) > 1 else [result.record]
        trace = timeline_json_ranks(records) if len(records) > 1 else timeline_json(records[0])
        written.append(atomic_write_json(timeline_path, json_safe(trace), indent=None))
    if flamegraph_path is not None:
        if not result.record.stacks.samples:
            log.warning("no stack samples were taken; %s is empty", flamegraph_path)
        written.append(atomic_write_text(flamegraph_path, collapsed_stacks(result.record.stacks)))
    return written
