"""The HTML report's first screen in a real browser: headless Chromium at desktop width.

The structural test (test_report_html.py) holds the order of the page's parts; this one holds what a
reader sees: at 1366x768 the verdict's first finding, its fix included, lies inside the first screen
and the first chart below it. Layout is measured by a copy of the page with a small script that writes
the boxes into the title (the report itself has no script); a PNG screenshot is taken too, and kept
under ``$STAVE_SCREENSHOT_DIR`` when that is set, for a person to look at.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from report_factory import make_result

from stave.report.html_doctor import doctor_html

WIDTH, HEIGHT = 1366, 768  # the most common desktop screen
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM = next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on PATH (Debian: apt-get install chromium)"),
]

# Boxes of the parts that must be on (or below) the first screen, written into the title once laid out.
_MEASURE = """<script>
const topOf = s => { const e = document.querySelector(s); return e ? e.getBoundingClientRect().top : null; };
const bottomOf = s => { const e = document.querySelector(s); return e ? e.getBoundingClientRect().bottom : null; };
document.title = JSON.stringify({verdict: topOf('.verdict'), card_bottom: bottomOf('.verdict .card'),
  fix_bottom: bottomOf('.verdict .card .fix'), chart: topOf('.chart'), width: document.documentElement.scrollWidth});
</script>"""


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
               f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={WIDTH},{HEIGHT}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def page_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(doctor_html(make_result()), encoding="utf-8")
    return path


def test_first_screen_holds_the_verdict(page_path: Path, tmp_path: Path) -> None:
    measured = tmp_path / "measured.html"
    measured.write_text(page_path.read_text(encoding="utf-8").replace("</body>", _MEASURE + "</body>"),
                        encoding="utf-8")
    run = _chromium(tmp_path, "--dump-dom", measured.as_uri())
    title = re.search(r"<title>(\{.*?\})</title>", run.stdout)
    assert title, f"Chromium printed no measured title (exit {run.returncode}): {run.stderr[-500:]}"
    box = json.loads(title.group(1).replace("&quot;", '"'))
    assert box["verdict"] < 200  # under the title line, above the run's details
    assert box["fix_bottom"] <= box["card_bottom"] <= HEIGHT  # the first finding and its fix, whole
    assert box["chart"] > box["card_bottom"]  # the plots come after
    assert box["width"] <= WIDTH  # nothing forces a horizontal scroll at desktop width


def test_screenshot_at_desktop_width(page_path: Path, tmp_path: Path) -> None:
    shot = Path(os.environ.get("STAVE_SCREENSHOT_DIR") or tmp_path) / "report_first_screen.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    run = _chromium(tmp_path, f"--screenshot={shot}", page_path.as_uri())
    assert shot.is_file(), f"no screenshot (exit {run.returncode}): {run.stderr[-500:]}"
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    assert (width, height) == (WIDTH, HEIGHT)
