"""Reports: turn measurements and findings into things people and programs read.

Shared primitives (used by the doctor, trace and bench reports):

- :mod:`stave.report.units`: number formatting with units; absent values render as "n/a".
- :mod:`stave.report.palette`: the phase colours every report uses.
- :mod:`stave.report.findings_view`: a list of findings as a rich renderable or an HTML fragment.
- :mod:`stave.report.html_page`: one self-contained HTML document (inline CSS, no network).
- :mod:`stave.report.charts`: matplotlib charts as inline SVG strings or PNG bytes.
- :mod:`stave.report.schemas`: the versioned JSON schemas and their validation.

The doctor's report (it renders a :class:`~stave.doctor.result.DoctorResult`):
:mod:`~stave.report.doctor_data` (the sections as plain data), :mod:`~stave.report.doctor_json`
(``stave.doctor/1``), :mod:`~stave.report.terminal` with :mod:`~stave.report.terminal_tables` (rich),
:mod:`~stave.report.html_doctor`, their shared words in :mod:`~stave.report.doctor_wording`,
:mod:`~stave.report.timeline` (Chrome/Perfetto JSON), :mod:`~stave.report.flamegraph`
(collapsed stacks) and :mod:`~stave.report.outputs` (writes them all atomically).

The trace's report: :mod:`~stave.report.trace_json`, :mod:`~stave.report.trace_terminal`,
:mod:`~stave.report.trace_html`; :mod:`~stave.report.trace_section` is its part of a doctor report,
found through :mod:`~stave.report.trace_section_lookup`. The ladder's report:
:mod:`~stave.report.bench_table`, :mod:`~stave.report.bench_json` (``stave.bench/1``),
:mod:`~stave.report.bench_html`.

Nothing here is imported by ``import stave``; heavy imports (matplotlib, pygments) happen lazily.
"""
