"""The CI subset of the scenario matrix (benchmarks/scenarios.py, benchmarks/scenarios/matrix.toml).

The registry is checked whole (every script exists and takes the common options; every mechanism
has at least three rows, a 1-core row and a hog row; every family has a healthy control). A
handful of clear-cut scenarios (``fast = true`` in the registry) run under ``stave doctor --json``
for a few steps with torch's default threads, and the doctor's top finding must be the one the
registry declares (a control: no finding about the job); their ``--fixed`` variant must run. No
timing is asserted: speed goals live in the benchmark.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLANTED = ROOT / "tests" / "planted"

MIN_SCENARIOS = 40
MIN_ROWS_PER_MECHANISM = 3


def _load_driver():
    spec = importlib.util.spec_from_file_location("stave_bench_scenarios", ROOT / "benchmarks" / "scenarios.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


driver = _load_driver()
SCENARIOS = driver.load_matrix()


def _env() -> dict[str, str]:
    # Torch's default threads: no OMP_NUM_THREADS, whatever the suite's environment says.
    env = {k: v for k, v in os.environ.items() if k not in driver.THREAD_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), str(PLANTED), env.get("PYTHONPATH")) if p)
    env["CUDA_VISIBLE_DEVICES"] = ""  # the planted mechanisms are CPU ones
    return env


def test_registry_covers_every_mechanism_in_three_rows_with_controls():
    assert len(SCENARIOS) >= MIN_SCENARIOS
    names = [s.name for s in SCENARIOS]
    assert len(names) == len(set(names)), "a scenario is listed twice"
    rows: dict[str, list] = {}
    for s in SCENARIOS:
        script = PLANTED / s.script
        assert script.is_file(), f"{s.name}: no {script}"
        assert "planted_args(" in script.read_text(encoding="utf-8"), f"{s.name} does not take --fixed/--steps"
        assert s.statistic in ("median_step_s", "mean_step_s", "samples_per_s")
        rows.setdefault(s.mechanism, []).extend(s.variants)
    for mechanism, variants in rows.items():
        if mechanism in ("DATA_WORKER_STARTUP", "STEP_OUTLIERS", "FORK_UNSAFE_HANDLE"):
            continue  # older planted scripts kept in the matrix; one script each
        assert len(variants) >= MIN_ROWS_PER_MECHANISM, mechanism
        assert any(v.cores == 1 for v in variants), f"{mechanism}: no 1-core row"
        assert any(v.hog for v in variants), f"{mechanism}: no row beside a hog"
    assert {"input pipeline", "distributed sampling", "torch.compile", "padding", "optimizer"} <= {
        raw_family for raw_family in _families()}


def _families() -> set[str]:
    import tomllib

    data = tomllib.loads(driver.MATRIX_PATH.read_text(encoding="utf-8"))
    return {s["family"] for s in data["scenario"] if s.get("expect", "") == "" and "family" in s}


def test_expected_findings_have_docs_pages_or_are_pending():
    for s in SCENARIOS:
        if s.expect:
            assert (ROOT / "docs" / "findings" / f"{s.expect}.md").is_file(), s.expect


def test_job_top_lets_machine_busy_lead_beside_a_hog():
    findings = [["MACHINE_BUSY", 1.3, "warning"], ["SMALL_BATCH", 4.0, "critical"]]
    assert driver.job_top(findings, hog=True) == "SMALL_BATCH"
    assert driver.job_top(findings, hog=False) == "MACHINE_BUSY"
    assert driver.job_top([], hog=True) is None


def test_judge_counts_a_wide_spread_as_a_miss():
    row = driver.Row("s", "v", "SMALL_BATCH", "SMALL_BATCH", 2, False, [], "samples_per_s", 5,
                     status="unmeasured", measured_speedup=2.0, spread=0.9,
                     findings=[["SMALL_BATCH", 2.0, "critical"]])
    driver.judge(row)
    assert row.top_right is True
    assert row.estimate_within is False
    ok = driver.Row("s", "v", "SMALL_BATCH", "SMALL_BATCH", 2, False, [], "samples_per_s", 5,
                    measured_speedup=2.0, spread=0.1, findings=[["SMALL_BATCH", 2.9, "critical"]])
    driver.judge(ok)
    assert ok.estimate_within is True  # 2.9 / 2.0 = 1.45, inside 1.5x


def test_a_fix_slower_in_every_pair_scores_the_row_as_a_control_of_its_finding():
    def row(ratios, findings):
        r = driver.Row("s", "v", "CPU_CONTENTION", "CPU_CONTENTION", 2, False, [], "median_step_s", 2,
                       ratios=ratios, measured_speedup=sorted(ratios)[len(ratios) // 2], spread=0.1,
                       findings=findings)
        driver.judge(r)
        return r

    named = row([0.6, 0.7], [["CPU_CONTENTION", 1.2, "warning"]])
    silent = row([0.6, 0.7], [["OPTIMIZER_UNFUSED", 1.1, "info"]])
    mixed = row([0.9, 1.3], [["CPU_CONTENTION", 1.2, "warning"]])
    assert driver.not_planted_here(named) and driver.not_planted_here(silent)
    assert not driver.not_planted_here(mixed)  # one pair gained: still a planted row
    s = driver.summary([named, silent, mixed])
    assert s["top_right"] == [1, 1] and s["controls_clean"] == [1, 2]
    assert "not planted here" in driver.render_markdown(
        [named], {"date": "d", "machine": "m", "pairs": 2, "minutes": 1.0, "quick": True, "only": None,
                  "load_min": 0.0, "load_max": 0.0, "command": "c"})


def test_a_row_not_planted_here_is_clean_when_its_finding_names_another_fix():
    # The script's --fixed starts workers (hand_params num_workers) and measured slower: naming
    # DATA_CPU_BOUND with workers is the wrong verdict; naming it with a cheaper stage is not.
    def row(inputs):
        r = driver.Row("s", "v", "DATA_CPU_BOUND", "DATA_CPU_BOUND", 2, False, [], "median_step_s", 2,
                       ratios=[0.85, 0.9], measured_speedup=0.9, spread=0.1, fix_inputs=["workers"],
                       findings=[["DATA_CPU_BOUND", 1.5, "warning", inputs]])
        driver.judge(r)
        return r

    s = driver.summary([row(["load_cpu_s"]), row(["workers"])])
    assert s["controls_clean"] == [1, 2]
    # A row from before the inputs were kept (three fields) still counts any naming as wrong.
    old = driver.Row("s", "v", "DATA_CPU_BOUND", "DATA_CPU_BOUND", 2, False, [], "median_step_s", 2,
                     ratios=[0.85, 0.9], measured_speedup=0.9, spread=0.1, fix_inputs=["workers"],
                     findings=[["DATA_CPU_BOUND", 1.5, "warning"]])
    assert driver.summary([old])["controls_clean"] == [0, 1]
    scenario = next(sc for sc in SCENARIOS if sc.name == "cpu_transforms")
    assert "workers" in {driver.HAND_PARAM_INPUTS[n] for n, _ in scenario.hand_params}


def test_priority_order_covers_every_mechanism_before_any_hog_row():
    plan = [(sc, v) for sc in SCENARIOS for v in sc.variants]
    ordered = driver.prioritized(plan)
    def labels(rows):
        return sorted((sc.name, v.label, v.args) for sc, v in rows)

    assert labels(ordered) == labels(plan)  # the same rows, reordered
    first_hog = next(i for i, (_, v) in enumerate(ordered) if v.hog)
    assert {sc.mechanism for sc, _ in ordered[:first_hog]} == {sc.mechanism for sc in SCENARIOS}
    # Mechanisms take turns: the first rows are all different mechanisms.
    mechs = {sc.mechanism for sc in SCENARIOS}
    assert len({sc.mechanism for sc, _ in ordered[:len(mechs)]}) == len(mechs)


def test_budget_keeps_rows_in_order_until_one_does_not_fit():
    plan = [(sc, sc.variants[0]) for sc in SCENARIOS[:4]]
    assert driver.within_budget(plan, [60.0, 60.0, 30.0, 10.0], budget_s=130.0) == (2, 120.0)
    assert driver.within_budget(plan, [60.0, 60.0, 30.0, 10.0], budget_s=None) == (4, 160.0)


def test_pace_is_actual_over_estimated_seconds():
    rows = [driver.Row("s", "v", "m", "m", 2, False, [], "median_step_s", 2, seconds=90.0)]
    assert driver.pace_so_far(rows, [(60.0, True)]) == pytest.approx(1.5)
    assert driver.pace_so_far([], []) == 1.0


def test_runtime_estimate_from_a_past_run_and_the_steps_each_statistic_needs():
    sc = next(s for s in SCENARIOS if s.statistic == "median_step_s" and s.steps > s.warmup + 20)
    v = sc.variants[0]
    assert driver.timing_steps(sc, sc.steps) == sc.warmup + driver.MEDIAN_MEASURED_STEPS
    assert driver.warmup_steps(sc, sc.steps) < sc.steps
    mean = next(s for s in SCENARIOS if s.statistic == "mean_step_s")
    assert driver.timing_steps(mean, mean.steps) == mean.steps
    compiled = next(s for s in SCENARIOS if s.warmup <= 1)
    assert driver.warmup_steps(compiled, compiled.steps) == compiled.steps  # its caches need the whole run
    # A past row of 100 s over 2 pairs, all runs at 40 steps, 2 s start-up: 4 timed runs, the warm-up
    # pair and the doctor's (two runs' worth), 8 runs (16 s), and 4 x 40 + 2 x 40 + 2 x 40 = 320 steps.
    history = {(sc.name, v.label): driver.PastRow(100.0, 2, 40, 40, 40)}
    est, known = driver.estimate_row_s(sc, v, 5, 40, history, startup_s=2.0)
    runs, units = driver._row_units(5, 40, driver.timing_steps(sc, 40), driver.warmup_steps(sc, 40))
    assert known and est == pytest.approx(runs * 2.0 + units * (100.0 - 8 * 2.0) / 320)
    guess, known = driver.estimate_row_s(sc, v, 5, 40, {}, startup_s=2.0)
    assert not known and guess == pytest.approx(runs * 2.0 + units * driver.GUESS_STEP_S)


def test_history_skips_other_json_beside_the_results(tmp_path):
    # A saved record (a JSON list) or a report in the results folder is not a results file.
    sc = SCENARIOS[0]
    row = {"scenario": sc.name, "variant": sc.variants[0].label, "status": "ok", "seconds": 30.0, "pairs": 5}
    (tmp_path / "a.rec.json").write_text(json.dumps([{"schema": "x"}]))
    (tmp_path / "b.json").write_text(json.dumps({"meta": [], "rows": [row]}))
    (tmp_path / "c.json").write_text(json.dumps({"meta": {}, "rows": [row]}))
    history = driver.load_history(sorted(tmp_path.glob("*.json")), SCENARIOS)
    assert list(history) == [(sc.name, sc.variants[0].label)]


def _fast_cases():
    for s in SCENARIOS:
        if not s.fast:
            continue
        marks = [pytest.mark.slow]
        missing = driver.missing_modules(s)
        if missing:
            marks.append(pytest.mark.skip(reason=f"{', '.join(missing)} not installed"))
        yield pytest.param(s, id=s.name, marks=marks)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("scenario", list(_fast_cases()))
def test_fast_scenario_top_finding_and_fixed_runs(scenario, tmp_path):
    script = str(PLANTED / scenario.script)
    n, args = str(scenario.fast_steps), list(scenario.fast_args)
    fixed = subprocess.run([sys.executable, script, "--fixed", "--steps", "8", "--warmup", "2", *args], cwd=ROOT,
                           env=_env(), capture_output=True, text=True, timeout=240)
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    assert driver.timing(fixed.stdout)["steps"] > 0
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "stave", "doctor", "--quiet", "--steps", n, "--json", str(out),
                           script, "--steps", n, *args], cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=280)
    assert proc.returncode == 0, proc.stderr[-2000:]
    findings = [[f["id"], f["est_speedup"], f["severity"]] for f in json.loads(out.read_text())["findings"]]
    if scenario.healthy:
        assert [f for f in findings if f[0] != driver.MACHINE_BUSY] == [], findings
    else:
        # The test judges the job: a CI machine may be busy with other work, and MACHINE_BUSY first
        # (about the machine, not the job) then lets the job's top finding count, as beside a hog.
        assert driver.job_top(findings, hog=True) == scenario.expect, findings


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_healthy_script_beside_a_hog_gets_machine_busy_only(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    out = tmp_path / "report.json"
    with driver.Hog(cpus[0]):
        proc = subprocess.run([sys.executable, "-m", "stave", "doctor", "--quiet", "--steps", "20", "--json", str(out),
                               str(PLANTED / "healthy.py"), "--steps", "20"], cwd=ROOT, env=_env(),
                              capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ids = [f["id"] for f in json.loads(out.read_text())["findings"]]
    assert ids == [driver.MACHINE_BUSY], ids


# Small sizes for the GPU scripts' CPU runs: the CPU only shows they run, not what they plant.
GPU_SCRIPT_SMALL_ARGS = {
    "gpu_healthy": ["--batch-size", "32", "--width", "64"],
    "gpu_sync_per_step": ["--batch-size", "32", "--width", "64", "--layers", "2"],
    "gpu_pageable_copies": ["--batch-size", "8", "--size", "32", "--batches", "2"],
    "gpu_small_batch": ["--width", "64", "--fixed-batch-size", "64"],
    "gpu_fp32_matmul": ["--batch-size", "32", "--width", "64"],
    "gpu_cudnn_benchmark_off": ["--batch-size", "2", "--size", "32"],
    "gpu_data_main_process": ["--batch-size", "8", "--fixed-workers", "1"],
}


def test_gpu_registry_and_its_scripts_run_planted_and_fixed(capsys):
    """The GPU rows (matrix_gpu.toml) load, name scripts that exist and expectations with docs pages,
    and every script runs on a CPU, planted and fixed, to its timing line (a GPU row itself is
    skipped without CUDA: nothing else keeps these scripts from rotting between lent GPUs)."""
    import runpy

    gpu = driver.load_matrix(driver.GPU_MATRIX_PATH)
    assert {s.name for s in gpu} == set(GPU_SCRIPT_SMALL_ARGS)
    assert all(s.device == "cuda" and not s.warmup_pair for s in gpu)
    assert all(s.statistic in ("mean_step_s", "samples_per_s") for s in gpu)  # the device's pace, not launches
    assert any(s.healthy for s in gpu)
    for s in gpu:
        if s.expect:
            assert (ROOT / "docs" / "findings" / f"{s.expect}.md").is_file(), s.expect
    sys.path.insert(0, str(PLANTED))
    saved_argv = sys.argv
    try:
        for s in gpu:
            for fixed in ([], ["--fixed"]):
                sys.argv = [s.script, "--steps", "3", "--warmup", "1", *GPU_SCRIPT_SMALL_ARGS[s.name], *fixed]
                runpy.run_path(str(PLANTED / s.script), run_name="__main__")
                line = capsys.readouterr().out.strip().splitlines()[-1]
                assert line.startswith(driver.TIMING_PREFIX), (s.name, fixed, line)
                assert json.loads(line[len(driver.TIMING_PREFIX):])["steps"] == 2
    finally:
        sys.argv = saved_argv
        sys.path.remove(str(PLANTED))
