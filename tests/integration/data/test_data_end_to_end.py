"""End to end through the installed entry points: `python -m stave pack`, the benchmark's --quick run, synth."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

IMAGES = Path(__file__).resolve().parents[2] / "data" / "images"


def _stave(args: list[str], python_exe: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python_exe, "-m", "stave", *args], capture_output=True, text=True, env=env, timeout=120)


def test_pack_verify_and_hostile_shard_from_the_command_line(tmp_path: Path, python_exe: str, stave_env: dict[str, str]) -> None:
    src = tmp_path / "src" / "only"
    src.mkdir(parents=True)
    for name in ("chelsea_240x160.jpg", "rocket_restart_160x107.jpg", "coffee_96x64.png"):
        shutil.copy(IMAGES / name, src / name)
    dst = tmp_path / "packed"
    done = _stave(["pack", str(src.parent), str(dst)], python_exe, stave_env)
    assert done.returncode == 0, done.stderr
    assert "packed 3 images" in done.stdout
    shard = dst / "shard-00000.stave"
    data = bytearray(shard.read_bytes())
    data[200] ^= 0x55
    shard.write_bytes(bytes(data))
    bad = _stave(["pack", "--verify", str(dst)], python_exe, stave_env)
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "shard-00000.stave" in bad.stderr and "checksum" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.slow
def test_benchmark_quick_run_reports_every_pipeline(tmp_path: Path, python_exe: str, stave_env: dict[str, str]) -> None:
    pytest.importorskip("skimage", reason="the benchmark's image generator needs scikit-image (pip install 'stave[bench]')")
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [python_exe, "-m", "stave", "bench", "data", "--quick", "--workdir", str(tmp_path / "work"), "--json", str(out)],
        capture_output=True, text=True, env=stave_env, timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["schema"] == "stave.bench.data/1"
    keys = {r["key"] for r in report["results"]}
    assert {"baseline", "pil_to_tensor", "stave", "stave_processes", "stave_max256", "stave_eval", "stave_raw32"} <= keys
    assert all(r["images_per_s"] > 0 and r["cpu_s_per_image"] > 0 for r in report["results"])
    assert len(report["baseline_search"]) >= 2 and report["decode_ceiling"]["images_per_s"] > 0
    assert "stave_vs_baseline" in done.stdout
