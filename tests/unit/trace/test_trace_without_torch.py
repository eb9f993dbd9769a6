"""`stave trace` never imports torch: its memory bound (512 MiB on a 1 GB trace) leaves no room for
torch's ~250 MiB, and a trace can be analysed where torch is not installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TRACE = Path(__file__).resolve().parents[2] / "data" / "traces" / "h100" / "fp32.json.gz"
SRC = Path(__file__).resolve().parents[3] / "src"


def test_analysing_a_trace_and_writing_its_report_imports_no_torch() -> None:
    code = (
        "import sys\n"
        "from stave.diagnose.trace_report import analyze_paths\n"
        "from stave.report.trace_json import trace_json\n"
        f"trace_json(analyze_paths([{str(TRACE)!r}]))\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
