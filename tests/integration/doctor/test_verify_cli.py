"""`stave doctor --verify` end to end: a planted script, a fix that changes the results (reverted by
the loss check), and a fix that crashes the script (reported, not raised)."""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path

import pytest

from stave.capture.runner import Target
from stave.diagnose.finding import Finding
from stave.doctor.fix_map import FixPlan
from stave.doctor.verify import VerifyOptions, verify_plans
from stave.inject.selection import request

pytestmark = pytest.mark.slow

PLANTED = Path(__file__).resolve().parents[2] / "planted"

# A hand-rolled weight decay added to the gradients between zero_grad and backward, skipped where a
# gradient is None: with zero_grad(set_to_none=False) it applies, with set_to_none=True it silently
# does not, so the fix changes what is learned. Without the guard, set_to_none makes it crash.
DECAY_SCRIPT = textwrap.dedent(
    """
    import sys, torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    torch.manual_seed(0)
    ds = TensorDataset(torch.randn(512, 16), torch.randint(0, 4, (512,)))
    loader = DataLoader(ds, batch_size=32, shuffle=True)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    guarded = "--unguarded" not in sys.argv
    step = 0
    for epoch in range(4):
        for x, y in loader:
            opt.zero_grad(set_to_none=False)
            for p in model.parameters():
                # (the first step has no gradients yet, with or without set_to_none)
                if p.grad is not None or (not guarded and step > 0):
                    p.grad.add_(p.detach(), alpha=2.0)
            step += 1
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
    """
)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_verify_on_a_planted_script(tmp_path: Path, stave_env: dict[str, str], run_stave) -> None:
    script = PLANTED / "oversubscription.py"
    before = _sha(script)
    out = tmp_path / "r.json"
    proc = run_stave(["doctor", "--steps", "12", "--verify-top", "3", "--verify-pairs", "1", "--json", str(out),
                      "--html", str(tmp_path / "r.html"), str(script)], stave_env, timeout=400)
    assert proc.returncode in (0, 1), proc.stderr
    assert _sha(script) == before  # the user's file is never edited
    assert "written again by each run" in proc.stderr
    report = json.loads(out.read_text())
    from stave.report.doctor_json import validate_doctor_json

    validate_doctor_json(report)
    verify = report["verify"]
    job_findings = [f["id"] for f in report["findings"] if f["id"] != "MACHINE_BUSY"]
    assert [f["id"] for f in verify["findings"]] == job_findings[:3]
    threads = [f for f in verify["findings"] if f["id"] == "THREAD_OVERSUBSCRIPTION"]
    assert threads, "the planted oversubscription is among the top findings"
    item = threads[0]
    assert item["fixes"].startswith("threads(threads=")
    assert item["status"] in ("kept", "reverted"), item
    applied = item["fix_report"][0]
    assert applied["status"] == "applied" and any("asked for" in n for n in applied["notes"])
    if item["status"] == "kept":
        assert item["pairs"] == 1 and item["measured_speedup"] > 0 and item["loss_check"]["passed"]
    assert "Verification (--verify)" in proc.stdout
    assert 'id="verify"' in (tmp_path / "r.html").read_text()


def _finding(finding_id: str) -> Finding:
    return Finding(finding_id, "warning", 1.2, finding_id, {}, "fix")


def test_a_fix_that_changes_the_results_is_reverted(tmp_path: Path) -> None:
    script = tmp_path / "decay.py"
    script.write_text(DECAY_SCRIPT)
    plan = FixPlan("PLANTED", (request("set_to_none"),))
    out = verify_plans([(_finding("PLANTED"), plan)], Target(str(script)), VerifyOptions(pairs=1, steps=8, warmup=2),
                       str(tmp_path / "work"))
    item = out.findings[0]
    assert item.status == "reverted", item
    assert "loss check failed" in item.reason and item.loss["max_dev"] > item.loss["tolerance"]
    assert item.fix_report[0]["status"] == "applied"


def test_a_fix_that_crashes_the_script_is_reported(tmp_path: Path) -> None:
    script = tmp_path / "decay.py"
    script.write_text(DECAY_SCRIPT)
    plan = FixPlan("PLANTED", (request("set_to_none"),))
    out = verify_plans([(_finding("PLANTED"), plan)], Target(str(script), ("--unguarded",)),
                       VerifyOptions(pairs=1, steps=8, warmup=2), str(tmp_path / "work"))
    item = out.findings[0]
    assert item.status == "crashed" and "with the fix" in item.reason
    assert "NoneType" in item.reason or "None" in item.reason
