"""The three built-in workloads climb the ladder from the command line (--quick; gpt-char every rung,
the image workloads their image rungs), and the planted rung is caught with real timing. Slow: minutes on two cores, so marked ``slow``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from stave.report.bench_json import load_schema

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("workload", ["seed-resnet18", "gpt-char", "jpeg-resnet"])
def test_workload_climbs_every_rung_with_quick(workload: str, tmp_path: Path) -> None:
    if workload == "jpeg-resnet":
        # The JPEG generator cuts real photographs out of scikit-image's samples ([bench] extra).
        pytest.importorskip("skimage", reason="jpeg-resnet's images come from scikit-image: pip install 'stave[bench]'")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env["STAVE_BENCH_CACHE"] = str(tmp_path / "cache")  # jpeg-resnet generates and packs its images here
    out = tmp_path / "result.json"
    command = [sys.executable, "-m", "stave", "bench", "ladder", "--workload", workload, "--quick", "--json", str(out)]
    if workload == "jpeg-resnet":
        # gpt-char climbs the whole ladder; here the point is the loader rung (and the rest costs
        # two minutes of a 2-core test run).
        command += ["--rungs", "uint8,loader:stave.data.ImageLoader,autocast,compile"]
    elif workload == "seed-resnet18":
        # The image rungs (gpt-char climbs the whole ladder): the whole climb takes 45-80 s here.
        command += ["--rungs", "uint8,channels_last,autocast,compile"]
    result = subprocess.run(
        command,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, load_schema())
    names = [r["name"] for r in doc["rungs"]]
    assert names[0] == "baseline" and "autocast" in names and "compile" in names
    compile_row = next(r for r in doc["rungs"] if r["name"] == "compile")
    assert compile_row["status"] == "skipped" and "--quick" in compile_row["reason"]
    for row in doc["rungs"]:
        assert row["reason"], row  # every rung says why it was kept, reverted or skipped
        if row["status"] == "reverted":
            assert row["kept"] is False
    assert doc["fed_ratio"] is not None and doc["best_speedup"] > 0
    assert doc["mfu"]["final"] is not None
    if workload == "jpeg-resnet":
        assert any(r["name"].startswith("loader:") for r in doc["rungs"])


@pytest.mark.slow
def test_planted_rung_is_reverted_with_real_timing() -> None:
    sys.path.insert(0, str(REPO / "tests" / "unit" / "bench"))
    import tiny_job

    from stave.bench.ladder import LadderOptions, run_ladder
    from stave.bench.rungs import Rung, plan_autocast, plan_uint8

    options = LadderOptions(quick=True, timing=LadderOptions.quick_timing())
    result = run_ladder(
        tiny_job.planted_spec(width=1024),
        options,
        [Rung("uint8", "uint8", plan_uint8), Rung("autocast", "autocast", plan_autocast)],
    )
    planted = next(r for r in result.rungs if r.name == "uint8")
    bf16 = next(r for r in result.rungs if r.name == "autocast")
    assert planted.status == "reverted" and planted.revert_kind == "loss", planted.reason
    if bf16.status != "skipped":  # a CPU without native bf16 skips the rung
        trial = bf16.trials[0]
        assert trial.loss_passed, trial.reason
        # Kept unless this machine timed it as no faster: a speed verdict, never a loss one.
        assert bf16.status == "kept" or bf16.revert_kind == "speed"
