"""The doctor's HTML report and the page primitives: self-contained, plotted, escaped.

The golden page replaces each chart by a placeholder (matplotlib's SVG changes between its
releases; the charts have their own tests). Regenerate after an intended change:

    STAVE_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/report/test_report_html.py
"""

from __future__ import annotations

import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from report_factory import make_result

from stave.report.findings_view import findings_html
from stave.report.html_doctor import doctor_html, group_evenly
from stave.report.html_page import render_page, stacked_bar, table

# A reference that would make the browser fetch something: src/href/action/xlink:href/url()/@import
# pointing at a network location (protocol-relative "//host" included).
_EXTERNAL = re.compile(
    r"""(?:src|href|action|poster|data)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?\s*(?:https?:)?//|@import""", re.I
)


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs) -> None:
        self.tags.append(tag)
        if tag == "script":
            self.scripts += 1


@pytest.fixture(scope="module")
def page() -> str:
    return doctor_html(make_result())  # the synthetic two-rank run


def test_page_is_self_contained(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>")
    assert not _EXTERNAL.search(page)
    assert "http://" not in page and "https://" not in page
    parsed = _Collector()
    parsed.feed(page)
    assert parsed.scripts == 0
    assert "link" not in parsed.tags and "img" not in parsed.tags and "iframe" not in parsed.tags


def test_page_has_the_plots_and_sections(page: str) -> None:
    # breakdown over steps; CPU of the job (% of one core) and of the machine (% of all cores) apart; memory
    assert page.count("<svg") == 4
    assert "Step time by phase" in page
    for heading in ("Step time", "Utilization", "Data pipeline", "Top lines", "Ranks (2)", "Findings (3)", "Notes"):
        assert f"<h2>{heading}" in page
    assert "DATA_CPU_BOUND" in page and "docs/findings/DATA_CPU_BOUND.md" in page
    assert "Resize" in page
    assert "n/a" in page  # the absent PSI counters


def test_external_reference_detector_catches_what_it_should() -> None:
    for bad in ('<img src="https://x/y.png">', "<link href='//cdn/x.css'>", "a{background:url(http://x)}",
                "<style>@import 'x.css';</style>"):
        assert _EXTERNAL.search(bad), bad
    assert not _EXTERNAL.search('<use xlink:href="#m0a"/> <path clip-path="url(#p1)"/>')


def test_user_strings_cannot_inject_markup(hostile_result) -> None:
    page = doctor_html(hostile_result)
    assert "<script>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "<img" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "</pre><script>" not in page
    parsed = _Collector()
    parsed.feed(page)
    assert parsed.scripts == 0


def test_empty_run_renders_without_plots(empty_result) -> None:
    page = doctor_html(empty_result)
    assert "<svg" not in page
    assert "No step was counted" in page
    assert "No DataLoader was iterated" in page


def test_gpu_charts_appear_only_with_gpu_readings(single_result) -> None:
    single_result.record.config.device_type = "cuda"
    for i, sample in enumerate(single_result.record.host):
        sample.gpu_util_pct = 40.0 + i % 10
    page = doctor_html(single_result)
    assert "GPU utilization" in page
    assert page.count("<svg") == 5  # GPU memory is absent: a note instead of a flat line at zero
    assert "GPU memory: n/a" in page


def test_render_page_escapes_the_title_only() -> None:
    page = render_page("a <b> & c", "<p>trusted</p>")
    assert "<title>a &lt;b&gt; &amp; c</title>" in page
    assert "<p>trusted</p>" in page


def test_table_and_bar_escape_cells() -> None:
    html = table(("a", "b"), [("<x>", 1.5)], numeric=(1,))
    assert "&lt;x&gt;" in html and "<td class=num>1.5</td>" in html
    bar = stacked_bar([('"><script>', 0.5, "#fff")])
    assert "<script>" not in bar


def test_findings_fragment_highlights_fix_with_inline_styles(result) -> None:
    html = findings_html(result.findings)
    assert html.count('<section class="finding') == 3
    assert "sev-critical" in html
    assert 'style="' in html and "class=\"code\"" in html  # pygments, inline styles, no stylesheet
    assert "antialias" in html
    assert findings_html([]).startswith('<p class="empty">')


def test_group_evenly_keeps_order_and_bounds() -> None:
    groups = group_evenly(list(range(10)), 3)
    assert [list(g) for g in groups] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert len(group_evenly(list(range(5)), 10)) == 5


def test_page_matches_golden_with_charts_as_placeholders(result, monkeypatch) -> None:
    placeholder = lambda chart: f'<svg data-title="{chart.title}"></svg>'  # noqa: E731
    monkeypatch.setattr("stave.report.html_doctor.charts.to_svg", placeholder)
    page = doctor_html(result)
    golden = Path(__file__).resolve().parent / "golden" / "doctor_two_ranks.html"
    if os.environ.get("STAVE_UPDATE_GOLDEN") == "1":
        golden.write_text(page, encoding="utf-8")
    assert page == golden.read_text(encoding="utf-8"), f"HTML report differs from {golden}; see the docstring"


def test_verdict_block_comes_before_any_chart_and_table(page: str) -> None:
    verdict = page.index('<section class="verdict"')
    assert verdict < page.index("<svg") and verdict < page.index('<div class="chart">')
    assert verdict < page.index("<table") and verdict < page.index("<h2>Step time")
    block = page[verdict:page.index("</section>", verdict)]
    # The top finding (ranked first) with its speedup, its one-line evidence, its fix and a link to the details.
    assert "DATA_CPU_BOUND" in block and "est. " in block and '<div class="fix">' in block
    assert 'href="#finding-1"' in block and 'id="finding-1"' in page
    assert "measured step time (median)" in block
    # The info finding that buys nothing ("keep fp32") stays below, counted, not on the first screen.
    assert "NO_MIXED_PRECISION" not in block and "1 more finding in" in block
    assert "achievable" not in block  # the synthetic result has no step-model estimate


def test_verdict_shows_the_achievable_step_time_when_the_report_has_one(result) -> None:
    from stave.report.doctor_json import doctor_json
    from stave.report.verdict import headline_text

    report = doctor_json(result)
    measured = report["summary"]["step_time_s"]["median"]
    report["summary"]["achievable_step_s"] = measured / 2
    page = doctor_html(result, report)
    block = page[page.index('<section class="verdict"'):]
    assert "achievable with every fix applied (2.00x, step model)" in block
    assert headline_text(report, result.findings).endswith("step 227 ms (median) → 114 ms with every fix")


def test_evidence_is_labelled_for_people(page: str) -> None:
    keys = {k for f in make_result().findings for k in f.evidence}
    labels = re.findall(r'<tr><th title="[^"]*">([^<]*)</th>', page)  # the evidence tables' row labels
    assert keys and labels and not set(labels) & keys  # no raw key as visible text
    assert ">Median step time</th><td>228 ms<" in page and ">Data wait share</th><td>40.2%<" in page
    assert "Data wait share 40.2% · Data wait 94.1 ms · CPU system 97%" in page  # the verdict's line


def test_cpu_only_run_hides_what_it_does_not_have(single_result) -> None:
    from stave.report.doctor_json import doctor_json

    report = doctor_json(single_result)
    for loader in report["config"]["loaders"]:
        loader["num_workers"] = 0
    for point in report["utilization"]:
        point["cpu_workers_pct"] = None
    page = doctor_html(single_result, report)
    assert "<td>host→device</td>" not in page and "host→device 0.0%" not in page  # no row, no legend
    assert "no host→device copies in this run" in page
    assert "CPU, loader workers" not in page  # no row that can only say n/a
    assert "no loader workers: num_workers=0" in page
    assert "absent on this machine" not in page


def test_docs_links_open_from_where_the_page_is_written(result, tmp_path) -> None:
    from stave.report.findings_view import checkout_docs_href

    href = checkout_docs_href(tmp_path / "out")
    if href is None:
        pytest.skip("stave runs from an install without its docs/ (links are shown as text there)")
    page = doctor_html(result, html_dir=str(tmp_path / "out"))
    links = re.findall(r'href="([^"#]+\.md)"', page)
    assert links and all((tmp_path / "out" / link).resolve().is_file() for link in links)
    assert not any(link.startswith("/") for link in links)


def test_a_busy_machine_leads_the_verdict_even_when_its_estimate_is_one(result) -> None:
    # A VM's steal hides the job's own demand, so MACHINE_BUSY may be priced at 1.0x: it still comes
    # first in the one-line verdict and on the first screen, then the job's top finding.
    import dataclasses

    from stave.diagnose.finding import Finding, rank_findings
    from stave.report.doctor_json import doctor_json
    from stave.report.verdict import headline_text

    busy = Finding("MACHINE_BUSY", "info", 1.0, "The hypervisor gave 0.6 of the job's 2 usable cores to other "
                   "virtual machines", {"steal_cores": 0.6}, "# run again later")
    findings = rank_findings([busy, *result.findings])
    report = doctor_json(dataclasses.replace(result, findings=findings))
    line = headline_text(report, findings)
    job = next(f for f in findings if f.est_speedup > 1.0)
    assert line.startswith(f"Verdict: MACHINE_BUSY (the machine, not the job) · then {job.id} est.")
    page = doctor_html(dataclasses.replace(result, findings=findings), report)
    block = page[page.index('<section class="verdict"'):page.index("</section>", page.index('<section class="verdict"'))]
    assert block.index("MACHINE_BUSY") < block.index(job.id)
