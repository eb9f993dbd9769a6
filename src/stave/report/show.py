"""Show a doctor result on the terminal and write the files asked for (the one place that does both).

Used by ``stave doctor``, ``stave demo`` and ``stave.watch().report()``. The terminal report goes
to stdout (it is the command's data); every file is written atomically by
:func:`stave.report.outputs.write_doctor_outputs`.
"""

from __future__ import annotations

from rich.console import Console

from stave.doctor.result import DoctorResult
from stave.report.doctor_json import doctor_json
from stave.report.outputs import write_doctor_outputs


def show_and_write(
    result: DoctorResult,
    json_path: str | None = None,
    html_path: str | None = None,
    timeline_path: str | None = None,
    flamegraph_path: str | None = None,
    quiet: bool = False,
    console: Console | None = None,
) -> None:
    """Write each requested file, then render ``result`` to the terminal (unless ``quiet``)."""
    report = doctor_json(result)  # built once: the JSON, HTML and terminal reports all read it
    write_doctor_outputs(result, json_path=json_path or None, html_path=html_path or None,
                         timeline_path=timeline_path or None, flamegraph_path=flamegraph_path or None,
                         report=report)
    if not quiet:
        from stave.report.terminal import render_doctor

        render_doctor(result, console or Console(), report)
