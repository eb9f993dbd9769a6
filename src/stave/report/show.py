"""Show a doctor result on the terminal and write the files asked for (the one place that does both).

Used by ``stave doctor``, ``stave demo`` and ``stave.watch().report()``. The terminal report goes
to stdout (it is the command's data); every file is written atomically.
"""

from __future__ import annotations

from rich.console import Console

from stave.analyze.result import DoctorResult
from stave.files import atomic_write_json, atomic_write_text


def show_and_write(
    result: DoctorResult,
    json_path: str | None = None,
    html_path: str | None = None,
    timeline_path: str | None = None,
    flamegraph_path: str | None = None,
    quiet: bool = False,
    console: Console | None = None,
) -> None:
    """Render ``result`` to the terminal (unless ``quiet``) and write each requested file."""
    if json_path:
        from stave.report.doctor_json import doctor_json

        atomic_write_json(json_path, doctor_json(result))
    if html_path:
        from stave.report.html_doctor import doctor_html

        atomic_write_text(html_path, doctor_html(result))
    if timeline_path:
        from stave.report.timeline import timeline_json

        atomic_write_json(timeline_path, timeline_json(result.record), indent=None)
    if flamegraph_path:
        from stave.report.flamegraph import collapsed_stacks

        atomic_write_text(flamegraph_path, collapsed_stacks(result.record.stacks))
    if not quiet:
        from stave.report.terminal import render_doctor

        render_doctor(result, console or Console())
