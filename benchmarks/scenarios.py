"""The scenario matrix: does the doctor name each planted bottleneck, and is its estimate right?

Every scenario in ``benchmarks/scenarios/matrix.toml`` is one planted script in ``tests/planted/``
(plain PyTorch, or a framework's loop) with one bottleneck, a ``--fixed`` flag that applies its fix
by hand, and the finding the doctor should name first (declared in the registry, never here). Each
scenario runs in several variants: model and batch sizes (script arguments), 1 or 2 usable cores
(CPU affinity of the child process tree) and a background CPU hog (a busy-loop process pinned to
the variant's first core). Torch's default thread counts throughout: ``OMP_NUM_THREADS`` and
``MKL_NUM_THREADS`` are removed from the children's environment.

Per variant (a row):

1. one warm-up pair (short runs), then ``--pairs`` interleaved pairs of plain runs, planted and
   ``--fixed``, each a separate process (A B, B A, A B, ...); the measured speedup is the median over pairs of the ratio
   of the statistic the scenario names, with its spread ((max - min) / median); a spread above
   ``MAX_SPREAD`` makes the row *unmeasured* (a miss for the estimate goal);
2. ``stave doctor --json`` once on the planted script: top finding, and the est_speedup of the
   expected finding.

Results go to a JSON file after every row (atomic writes: Ctrl-C or a failure keeps the rows so
far) and, with ``--write-docs``, to the section between the ``scenarios`` markers in
docs/benchmarks.md: the confusion matrix (planted mechanism -> top finding), the estimate-vs-
measured table, hog consistency and the healthy controls, with the goals:

- the right top finding on >= 95 % of planted rows;
- no finding on a healthy control (beside a hog: MACHINE_BUSY only);
- the estimate within 1.5x of the measured speedup on >= 90 % of planted rows;
- with a hog, the same top finding as without (or MACHINE_BUSY first and that finding second).

The runtime is estimated and printed before anything runs (rows priced from earlier results files,
see :func:`estimate_row_s`); rows run in priority order (:func:`prioritized`), and ``--budget-min``
runs them while their estimate fits and states the rows it left out. The plain runs take the steps
their statistic needs (:func:`timing_steps`, :func:`warmup_steps`); the doctor's run takes the
scenario's steps.

    PYTHONPATH=src python benchmarks/scenarios.py [--quick] [--only PATTERN] [--pairs N]
        [--variant PATTERN] [--budget-min MIN] [--out PATH] [--write-docs] [--list] [--from-json PATH]

Framework scenarios (transformers, lightning, accelerate, timm) are skipped, one line each, when
the framework is not importable; add it with ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.util
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # the checkout's stave, when run as a plain script

from stave.analyze.stats import median, relative_spread  # noqa: E402
from stave.diagnose.finding import Finding  # noqa: E402
from stave.doctor.fix_map import plan_for  # noqa: E402
from stave.monitor.probes import spinner_code  # noqa: E402
from stave.files import atomic_write_json, atomic_write_text  # noqa: E402

MATRIX_PATH = ROOT / "benchmarks" / "scenarios" / "matrix.toml"
# The GPU rows (issue 14, item 5): run with --matrix where CUDA is available.
GPU_MATRIX_PATH = ROOT / "benchmarks" / "scenarios" / "matrix_gpu.toml"
PLANTED_DIR = ROOT / "tests" / "planted"
DOCS_PATH = ROOT / "docs" / "benchmarks.md"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "scenarios.json"
DOCS_BEGIN = "<!-- scenarios:begin -->"
DOCS_END = "<!-- scenarios:end -->"
TIMING_PREFIX = "PLANTED-TIMING "  # the last line every planted script prints (tests/planted/_timing.py)

# The goals.
GOAL_TOP_SHARE = 0.95  # right top finding on at least this share of planted rows
GOAL_ESTIMATE_SHARE = 0.90  # estimate within ESTIMATE_FACTOR on at least this share
ESTIMATE_FACTOR = 1.5  # estimate and measurement agree when neither exceeds the other by more
MAX_SPREAD = 0.5  # a row whose pair ratios spread more than this is unmeasured (a miss)
MIN_PAIRS_FOR_GOALS = 5  # fewer pairs (--quick) is a smoke run: goals printed, not claimed
MACHINE_BUSY = "MACHINE_BUSY"
# A run longer than this is stuck (the slowest planted run takes about a minute on a quiet 2-core machine).
RUN_TIMEOUT_S = 900
# Environment variables that would pin torch's thread pools: the matrix runs torch's defaults.
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
# A run timed on its median step needs no more measured steps than this: the median of 20 steady steps
# sits within about a third of a step-time standard deviation of the run's own, far inside the 50 %
# spread limit and the 1.5x estimate band; more steps only cost time. Mean and samples/s statistics
# keep the scenario's steps (they must cover its periodic costs: evaluations, stalls, epoch starts).
MEDIAN_MEASURED_STEPS = 20
# The doctor's run costs about two plain runs (its probes and the analysis after the script); used
# only to estimate the runtime.
DOCTOR_RUN_COST = 2.0
# Without a previous result for a row, its runs are guessed at this many seconds a step (the slowest
# planted steps on a quiet 2-core machine take about a quarter second); the estimate says how many
# rows it guessed.
GUESS_STEP_S = 0.25
# Rows run in this order of kinds under --budget-min: each scenario's first row (the goals' main
# evidence), its hog row (the hog goal), its 1-core row, then its other variants.
PRIORITY_KINDS = ("first", "hog", "one_core", "other")


class ScenarioError(Exception):
    """A child run failed or printed no timing; the row records it and the matrix goes on."""


@dataclass(frozen=True)
class Variant:
    """One row of the matrix: script arguments, usable cores, background hog."""

    name: str
    args: tuple[str, ...] = ()
    cores: int = 2
    hog: bool = False

    @property
    def label(self) -> str:
        cores = f"{self.cores}c" if self.cores > 0 else "allc"
        return f"{self.name}/{cores}{'/hog' if self.hog else ''}"


@dataclass(frozen=True)
class Scenario:
    """One planted script and what the doctor should say about it (from matrix.toml)."""

    name: str
    script: str
    mechanism: str  # the planted mechanism ("healthy" for a control)
    expect: str  # the expected top finding; "" for a healthy control
    statistic: str  # median_step_s / mean_step_s (shrink with the fix) or samples_per_s (grows)
    steps: int
    quick_steps: int
    warmup: int
    variants: tuple[Variant, ...]
    requires: tuple[str, ...] = ()
    nproc: int = 1  # > 1: launched with torchrun (gloo), the doctor with --nproc-per-node
    expect_without_native_bf16: str | None = None  # the expectation on a CPU without native bf16
    fast: bool = False  # part of the CI subset (tests/integration/test_scenarios_fast.py)
    fast_args: tuple[str, ...] = ()
    fast_steps: int = 15
    framework: str = ""
    # An injected fix's parameter -> the script's option that applies the same value by hand
    # (``num_workers -> --fixed-workers``): benchmarks/verify_vs_hand.py then times the hand fix
    # with the value the doctor named, not the script author's own choice.
    hand_params: tuple[tuple[str, str], ...] = ()
    device: str = "cpu"  # "cuda": a GPU row (matrix_gpu.toml), skipped where CUDA is not available
    # The untimed first pair warms the page cache and the compile caches for the pairs after it; a
    # GPU row's data is made in memory and its caches are per process, so it can go without.
    warmup_pair: bool = True

    @property
    def healthy(self) -> bool:
        return self.expect == ""


def native_bf16_cpu() -> bool:
    """True when the CPU has native bf16 matmul instructions (AMX-BF16 or AVX512-BF16)."""
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (the platform's machine type where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:  # not Linux: the machine type is what can be named
        return platform.processor() or platform.machine()
    return platform.processor() or platform.machine()


def gpu_name() -> str:
    """The first CUDA device's name ("" without one), read through stave's device module."""
    from stave.device import cuda_available, describe_device

    return describe_device("cuda").name if cuda_available() else ""


def torch_version() -> str:
    """The torch the children run (a GPU machine's image may bring its own)."""
    import torch

    return torch.__version__


def load_matrix(path: Path = MATRIX_PATH, bf16: bool | None = None) -> list[Scenario]:
    """The scenarios of the registry, their expectations resolved for this machine's CPU."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    defaults = data.get("defaults", {})
    default_variants = data.get("default_variants", [])
    native = native_bf16_cpu() if bf16 is None else bf16
    out: list[Scenario] = []
    for raw in data["scenario"]:
        expect = raw.get("expect", "")
        if "expect_without_native_bf16" in raw and not native:
            expect = raw["expect_without_native_bf16"]
        variants = tuple(
            Variant(v["name"], tuple(v.get("args", ())), int(v.get("cores", 2)), bool(v.get("hog", False)))
            for v in raw.get("variants", default_variants)
        )
        out.append(Scenario(
            name=raw["name"],
            script=raw.get("script", raw["name"] + ".py"),
            mechanism=raw["mechanism"],
            expect=expect,
            statistic=raw.get("statistic", defaults.get("statistic", "median_step_s")),
            steps=int(raw.get("steps", defaults.get("steps", 40))),
            quick_steps=int(raw.get("quick_steps", defaults.get("quick_steps", 15))),
            warmup=int(raw.get("warmup", defaults.get("warmup", 5))),
            variants=variants,
            requires=tuple(raw.get("requires", ())),
            nproc=int(raw.get("nproc", 1)),
            expect_without_native_bf16=raw.get("expect_without_native_bf16"),
            fast=bool(raw.get("fast", False)),
            fast_args=tuple(raw.get("fast_args", ())),
            fast_steps=int(raw.get("fast_steps", defaults.get("fast_steps", 15))),
            framework=raw.get("framework", ""),
            hand_params=tuple(sorted(raw.get("hand_params", {}).items())),
            device=raw.get("device", defaults.get("device", "cpu")),
            warmup_pair=bool(raw.get("warmup_pair", defaults.get("warmup_pair", True))),
        ))
    return out


def missing_modules(scenario: Scenario) -> list[str]:
    """The modules a scenario needs that this Python cannot import."""
    return [m for m in scenario.requires if importlib.util.find_spec(m) is None]


def child_env() -> dict[str, str]:
    """The children's environment: the checkout's stave first, torch's default thread counts."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), str(PLANTED_DIR), env.get("PYTHONPATH")) if p)
    return env


def core_set(cores: int) -> set[int]:
    """The first ``cores`` CPUs this process may use (all of them for 0: a GPU row runs on the
    machine as it is)."""
    usable = sorted(os.sched_getaffinity(0))
    if cores <= 0:
        return set(usable)
    if cores > len(usable):
        raise ScenarioError(f"the variant wants {cores} cores, this process may use {len(usable)}")
    return set(usable[:cores])


def run_child(cmd: Sequence[str], cpus: set[int], timeout_s: float = RUN_TIMEOUT_S) -> str:
    """Run ``cmd`` pinned to ``cpus`` (its whole process tree inherits the affinity); its stdout."""
    proc = subprocess.Popen(
        list(cmd), cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=lambda: os.sched_setaffinity(0, cpus),
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise ScenarioError(f"{' '.join(cmd[-4:])} ran past {timeout_s:.0f} s") from exc
    except BaseException:
        # Ctrl-C: the child and its workers go too, none is left behind.
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    if proc.returncode != 0:
        tail = " | ".join((err or out).strip().splitlines()[-3:])
        raise ScenarioError(f"{' '.join(cmd[-4:])} exited {proc.returncode}: {tail}")
    return out


class Hog:
    """A busy-loop process pinned to one core: another job on the machine."""

    def __init__(self, cpu: int) -> None:
        self.cpu = cpu
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> "Hog":
        self.proc = subprocess.Popen(
            [sys.executable, "-S", "-c", spinner_code(os.getpid())], start_new_session=True,
            preexec_fn=lambda: os.sched_setaffinity(0, {self.cpu}),
        )
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


def script_cmd(scenario: Scenario, variant: Variant, steps: int, fixed: bool) -> list[str]:
    """The plain run of the script (torchrun for a multi-rank scenario)."""
    script = str(PLANTED_DIR / scenario.script)
    head = [sys.executable, script]
    if scenario.nproc > 1:
        head = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={scenario.nproc}",
                script]
    return head + ["--steps", str(steps), "--warmup", str(scenario.warmup), *variant.args] + (["--fixed"] if fixed else [])


def doctor_cmd(scenario: Scenario, variant: Variant, steps: int, json_path: Path,
               record_path: Path | None = None) -> list[str]:
    """The planted script under ``stave doctor --json`` (through :mod:`benchmarks.record_doctor`, which
    keeps the run's RunRecord, when ``record_path`` is given)."""
    dist = [f"--nproc-per-node={scenario.nproc}"] if scenario.nproc > 1 else []
    head = ["-m", "benchmarks.record_doctor", str(record_path)] if record_path is not None else ["-m", "stave"]
    return [sys.executable, *head, "doctor", "--quiet", *dist, "--steps", str(steps), "--json",
            str(json_path), str(PLANTED_DIR / scenario.script), "--steps", str(steps), *variant.args]


def timing(stdout: str) -> dict[str, Any]:
    """The timing line a planted script prints last."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(TIMING_PREFIX):
            return json.loads(line[len(TIMING_PREFIX):])
    raise ScenarioError(f"no {TIMING_PREFIX.strip()} line in the output")


@dataclass
class Row:
    """One scenario x variant: measurement, doctor's answer and the verdicts."""

    scenario: str
    variant: str
    mechanism: str
    expect: str
    cores: int
    hog: bool
    args: list[str]
    statistic: str
    pairs: int
    status: str = "ok"  # ok / skipped / failed / unmeasured
    error: str = ""
    ratios: list[float] = field(default_factory=list)
    measured_speedup: float | None = None
    spread: float | None = None
    planted_value: float | None = None
    fixed_value: float | None = None
    findings: list[list[Any]] = field(default_factory=list)  # [id, est_speedup, severity] in rank order
    top_finding: str | None = None
    est_speedup: float | None = None
    top_right: bool | None = None
    estimate_within: bool | None = None
    control_clean: bool | None = None
    load_avg_1min: list[float] = field(default_factory=list)
    seconds: float = 0.0
    steps: int = 0  # the doctor's run (and the plain runs of a mean or samples/s statistic)
    timing_steps: int = 0  # the plain timed runs
    warmup_steps: int = 0  # the warm-up pair's runs
    hand_args: list[str] = field(default_factory=list)  # with --fixed: the value the doctor named (hand_params)
    # The step model's inputs the script's --fixed changes (from hand_params; empty: not known).
    fix_inputs: list[str] = field(default_factory=list)


def job_top(findings: Sequence[Sequence[Any]], hog: bool) -> str | None:
    """The top finding about the job: beside a hog, MACHINE_BUSY first lets the second one count."""
    ids = [f[0] for f in findings]
    if hog and ids and ids[0] == MACHINE_BUSY:
        ids = ids[1:]
    return ids[0] if ids else None


def judge(row: Row) -> None:
    """Fill the verdicts of a measured row (registry expectations against the doctor's answer)."""
    ids = [f[0] for f in row.findings]
    if not row.expect:
        about_job = [i for i in ids if i != MACHINE_BUSY]
        row.control_clean = not about_job
        return
    row.top_right = job_top(row.findings, row.hog) == row.expect
    est = next((float(f[1]) for f in row.findings if f[0] == row.expect), None)
    row.est_speedup = est
    if row.status != "ok" or row.measured_speedup is None:
        row.estimate_within = False  # unmeasured counts as a miss
        return
    ratio = (est if est is not None else 1.0) / row.measured_speedup
    row.estimate_within = 1.0 / ESTIMATE_FACTOR <= ratio <= ESTIMATE_FACTOR


def timing_steps(scenario: Scenario, steps: int) -> int:
    """Steps of the plain timed runs: a median statistic needs :data:`MEDIAN_MEASURED_STEPS` measured
    steps after the warm-up; a mean or a rate keeps all of ``steps`` (its periods)."""
    if scenario.statistic == "median_step_s":
        return min(steps, scenario.warmup + MEDIAN_MEASURED_STEPS)
    return steps


def warmup_steps(scenario: Scenario, steps: int) -> int:
    """Steps of the warm-up pair, whose timing is dropped: it only warms the page cache and the compile
    caches, which a short run does as well, except where the cost is in compiling every shape the run
    meets (``warmup`` 0 or 1: the compiles fall in the counted steps, only the first step's is left
    out), which takes the whole run."""
    if scenario.warmup <= 1:
        return steps
    return min(steps, max(scenario.quick_steps, scenario.warmup + 1))


def hand_fix_args(scenario: Scenario, fixes: str) -> list[str]:
    """The script options that apply, by hand, the values an injected fix uses (``hand_params``).

    ``fixes`` is the text of the injected fixes (``num_workers(num_workers=7) + persistent_workers``);
    a parameter the scenario maps to an option is passed with that value.
    """
    values = dict(re.findall(r"(\w+)=([\w.]+)", fixes))
    return [arg for name, option in scenario.hand_params if name in values for arg in (option, values[name])]


def named_fix_args(scenario: Scenario, findings: Sequence[dict[str, Any]]) -> list[str]:
    """The script options that give ``--fixed`` the value the doctor's expected finding names.

    The finding's fix is planned as ``--verify`` would inject it (learning changes allowed: a
    SMALL_BATCH fix is a batch size), so the measured fix is the change the estimate prices, not the
    script author's own choice of workers or batch.
    """
    if not scenario.hand_params:
        return []
    raw = next((f for f in findings if f.get("id") == scenario.expect), None)
    if raw is None:
        return []
    fields = {k: raw[k] for k in ("id", "severity", "est_speedup", "title", "evidence", "fix") if k in raw}
    try:
        finding = Finding(**fields)
    except (TypeError, ValueError):
        return []
    plan = plan_for(finding, allow_learning_changes=True)
    changed = finding.evidence.get("model_inputs_changed") or {}
    stage = finding.evidence.get("top_stage")
    if finding.id == "DATA_CPU_BOUND" and set(changed) == {"load_cpu_s"} and isinstance(stage, str) \
            and "drop_stage" in dict(scenario.hand_params):
        # A stage to make cheaper, priced as that stage costing nothing: the script runs without it.
        return hand_fix_args(scenario, f"drop_stage={stage}")
    if not plan.injectable and set(changed) == {"load_cpu_s"}:
        # A split that moves per-sample work to one op on the batch is a code change (no injection):
        # the scenario's own option applies it by hand.
        return hand_fix_args(scenario, "batch_transform=1")
    return hand_fix_args(scenario, plan.label())


def measure_row(scenario: Scenario, variant: Variant, pairs: int, steps: int, tmp: Path,
                records: Path | None = None) -> Row:
    """The doctor once, then interleaved planted/fixed pairs after a warm-up pair (the fixed side
    takes the value the doctor named where the scenario maps it: ``hand_params``)."""
    row = Row(scenario.name, variant.label, scenario.mechanism, scenario.expect, variant.cores, variant.hog,
              list(variant.args), scenario.statistic, pairs, steps=steps,
              timing_steps=timing_steps(scenario, steps), warmup_steps=warmup_steps(scenario, steps))
    start = time.perf_counter()
    cpus = core_set(variant.cores)
    hog = Hog(min(cpus)) if variant.hog else None
    try:
        if hog is not None:
            hog.__enter__()
        stem = f"{scenario.name}-{variant.name}-{variant.cores}-{int(variant.hog)}"
        report_path = tmp / f"{stem}.json"
        record_path = records / f"{stem}.rec.json" if records is not None else None
        run_child(doctor_cmd(scenario, variant, steps, report_path, record_path), cpus)
        report = json.loads(report_path.read_text(encoding="utf-8"))
        raw_findings = report.get("findings", [])
        row.findings = [[f["id"], f.get("est_speedup"), f.get("severity"),
                         sorted((f.get("evidence") or {}).get("model_inputs_changed") or {})] for f in raw_findings]
        row.top_finding = row.findings[0][0] if row.findings else None
        row.hand_args = named_fix_args(scenario, raw_findings)
        row.fix_inputs = fix_inputs_of(scenario, row.hand_args)
        grows = scenario.statistic == "samples_per_s"
        planted: list[float] = []
        fixed: list[float] = []
        # Pair 0 warms caches (page cache, compile caches) and is dropped.
        for i in range(0 if scenario.warmup_pair else 1, pairs + 1):
            row.load_avg_1min.append(os.getloadavg()[0])
            order = (False, True) if i % 2 == 0 else (True, False)
            got: dict[bool, float] = {}
            run_steps = row.warmup_steps if i == 0 else row.timing_steps
            for is_fixed in order:
                cmd = script_cmd(scenario, variant, run_steps, is_fixed) + (row.hand_args if is_fixed else [])
                got[is_fixed] = float(timing(run_child(cmd, cpus))[scenario.statistic])
            if i == 0:
                continue
            planted.append(got[False])
            fixed.append(got[True])
            row.ratios.append(got[True] / got[False] if grows else got[False] / got[True])
        row.measured_speedup = median(row.ratios)
        row.spread = relative_spread(row.ratios)
        row.planted_value = median(planted)
        row.fixed_value = median(fixed)
        if row.spread > MAX_SPREAD:
            row.status = "unmeasured"
    except ScenarioError as exc:
        row.status, row.error = "failed", str(exc)
    finally:
        if hog is not None:
            hog.__exit__(None, None, None)
    row.seconds = time.perf_counter() - start
    judge(row)
    return row


# --- runtime: estimate, priority, budget ---------------------------------------------------------


@dataclass(frozen=True)
class PastRow:
    """What a row cost in an earlier run (from a results file)."""

    seconds: float
    pairs: int
    steps: int
    timing_steps: int
    warmup_steps: int


def load_history(paths: Sequence[Path], scenarios: Sequence[Scenario]) -> dict[tuple[str, str], PastRow]:
    """Each row's cost in earlier results files (the newest file that has it wins); rows that failed
    or were skipped tell nothing about the cost and are left out."""
    by_name = {sc.name: sc for sc in scenarios}
    out: dict[tuple[str, str], PastRow] = {}
    for path in sorted(paths, key=lambda p: p.stat().st_mtime):
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a file being written or not a results file: no history from it
        if not isinstance(saved, dict) or not isinstance(saved.get("meta", {}), dict):
            continue  # other JSON beside the results (a record, a report): not a results file
        quick = bool(saved.get("meta", {}).get("quick"))
        for r in saved.get("rows", []):
            sc = by_name.get(r.get("scenario"))
            if sc is None or r.get("status") not in ("ok", "unmeasured") or not r.get("seconds"):
                continue
            # Files written before the steps were recorded ran every run at the scenario's steps.
            steps = int(r.get("steps") or (sc.quick_steps if quick else sc.steps))
            out[(sc.name, r["variant"])] = PastRow(float(r["seconds"]), int(r["pairs"]), steps,
                                                   int(r.get("timing_steps") or steps),
                                                   int(r.get("warmup_steps") or steps))
    return out


def measure_startup_s(cpus: set[int]) -> float:
    """Seconds a child takes to start Python and import torch (the part of every run that steps do not
    explain), measured once."""
    start = time.perf_counter()
    run_child([sys.executable, "-c", "import torch"], cpus, timeout_s=120)
    return time.perf_counter() - start


def _row_units(pairs: int, steps: int, timed: int, warm: int) -> tuple[float, float]:
    """(runs, steps run) of a row: the warm-up pair, the timed pairs and the doctor's run."""
    runs = 2.0 * pairs + 2.0 + DOCTOR_RUN_COST
    return runs, 2.0 * pairs * timed + 2.0 * warm + DOCTOR_RUN_COST * steps


def estimate_row_s(scenario: Scenario, variant: Variant, pairs: int, steps: int,
                   history: dict[tuple[str, str], PastRow], startup_s: float) -> tuple[float, bool]:
    """The row's estimated seconds and whether it came from a past run (else a guess).

    A run costs the start-up plus its steps; a past run of the row gives its seconds per step.
    """
    runs, units = _row_units(pairs, steps, timing_steps(scenario, steps), warmup_steps(scenario, steps))
    past = history.get((scenario.name, variant.label))
    scale = 1.0
    if past is None:
        # Another row of the same scenario: one core, or a hog on one of two, halves the CPU it gets.
        sibling = next((k for k in history if k[0] == scenario.name), None)
        if sibling is None:
            return runs * startup_s + units * GUESS_STEP_S, False
        past = history[sibling]
        scale = 2.0 if (variant.cores == 1 or variant.hog) and not (sibling[1].endswith("/1c")
                                                                     or sibling[1].endswith("/hog")) else 1.0
    p_runs, p_units = _row_units(past.pairs, past.steps, past.timing_steps, past.warmup_steps)
    per_step = max(0.0, past.seconds - p_runs * startup_s) / max(p_units, 1.0) * scale
    return runs * startup_s + units * per_step, True


def _kind(scenario: Scenario, variant: Variant) -> str:
    if variant == scenario.variants[0]:
        return "first"
    if variant.hog:
        return "hog"
    if variant.cores == 1:
        return "one_core"
    return "other"


def prioritized(plan: Sequence[tuple[Scenario, Variant]]) -> list[tuple[Scenario, Variant]]:
    """The rows in the order of :data:`PRIORITY_KINDS`; within a kind, mechanisms take turns, so a
    run cut short (a budget, Ctrl-C) still covers every mechanism."""
    out: list[tuple[Scenario, Variant]] = []
    for kind in PRIORITY_KINDS:
        by_mech: dict[str, list[tuple[Scenario, Variant]]] = {}
        for sc, v in plan:
            if _kind(sc, v) == kind:
                by_mech.setdefault(sc.mechanism, []).append((sc, v))
        queues = list(by_mech.values())
        while any(queues):
            for q in queues:
                if q:
                    out.append(q.pop(0))
    return out


def within_budget(plan: Sequence[tuple[Scenario, Variant]], estimates_s: Sequence[float],
                  budget_s: float | None) -> tuple[int, float]:
    """How many of the (prioritized) rows fit the budget, taken in order until the next does not;
    and their estimated seconds."""
    total = 0.0
    for i, est in enumerate(estimates_s):
        if budget_s is not None and total + est > budget_s:
            return i, total
        total += est
    return len(plan), total


def pace_so_far(rows: Sequence[Row], priced: Sequence[tuple[float, bool]]) -> float:
    """The rows' actual seconds over their estimate (1 before any row ran)."""
    estimated = sum(p[0] for p in priced)
    actual = sum(r.seconds for r in rows)
    return actual / estimated if rows and estimated > 0 else 1.0


def _share(flags: Sequence[bool | None]) -> tuple[int, int]:
    judged = [f for f in flags if f is not None]
    return sum(1 for f in judged if f), len(judged)


def hog_pairs(rows: Sequence[Row]) -> Iterator[tuple[Row, Row]]:
    """Each hog row with its twin without the hog (same scenario, arguments and cores)."""
    quiet = {(r.scenario, tuple(r.args), r.cores): r for r in rows if not r.hog and r.status != "skipped"}
    for r in rows:
        twin = quiet.get((r.scenario, tuple(r.args), r.cores))
        if r.hog and twin is not None and r.status != "skipped":
            yield twin, r


def hog_consistent(quiet: Row, hogged: Row) -> bool:
    """The same top finding with the hog, or MACHINE_BUSY first and the same finding second."""
    return job_top(hogged.findings, True) == quiet.top_finding


# A planted row whose fix measured slower than the script as written in every pair has no such
# bottleneck on this machine (a CPU with native bf16 computes two to three times faster than the
# AVX2 one some scripts were balanced on, so their loading is no longer competing with compute):
# naming it would send the user to a change that slows the job. Such a row is scored as a control of
# that finding: right when the doctor does not name it with that fix (:func:`names_planted_fix`).
NOT_PLANTED_MAX_RATIO = 1.0
# Findings about a failure, not speed (est_speedup 1.0 by design: a leak that ends in an OOM kill,
# a handle that breaks in a forked worker): their fix need not be faster, so their rows stay planted.
RISK_FINDINGS = frozenset({"MEMORY_GROWTH", "FORK_UNSAFE_HANDLE"})


# A fix parameter a scenario maps to a script option (hand_params) -> the step model's input it
# changes (a finding's evidence ``model_inputs_changed``): what a finding must change to name the
# script's --fixed.
HAND_PARAM_INPUTS = {"num_workers": "workers", "threads": "compute_threads", "batch_size": "batch_scale",
                     "batch_transform": "load_cpu_s", "drop_stage": "load_cpu_s"}
# hand_params that --fixed applies only when the doctor names them (else the script's own --fixed).
NAMED_ONLY_PARAMS = frozenset({"batch_transform", "drop_stage"})


def fix_inputs_of(scenario: Scenario, hand_args: Sequence[str]) -> list[str]:
    """The step model's inputs a row's --fixed changes: those of the options it was given, else of
    the script's own --fixed (its hand_params but the ones applied only when named)."""
    used = [n for n, option in scenario.hand_params if option in hand_args]
    if not used:
        used = [n for n, _ in scenario.hand_params if n not in NAMED_ONLY_PARAMS]
    return sorted({HAND_PARAM_INPUTS[n] for n in used if n in HAND_PARAM_INPUTS})


def names_planted_fix(row: Row, finding: Sequence[Any]) -> bool:
    """Whether ``finding`` (a row's [id, est, severity, inputs changed]) names the script's --fixed:
    its fix changes an input the --fixed changes. Unknown either way (an older row, a scenario
    without hand_params): it does."""
    if not row.fix_inputs or len(finding) < 4:
        return True
    return bool(set(finding[3]) & set(row.fix_inputs))


def not_planted_here(row: Row) -> bool:
    """The row's fix slowed the job in every measured pair (see :data:`NOT_PLANTED_MAX_RATIO`)."""
    return (bool(row.expect) and row.expect not in RISK_FINDINGS and row.status == "ok" and bool(row.ratios)
            and max(row.ratios) < NOT_PLANTED_MAX_RATIO)


def _clean(row: Row) -> bool | None:
    """A control's verdict: no finding about the job; a row not planted here: its finding not named
    with the fix that measured slower (the same finding with another fix, say a cheaper stage where
    the workers would not pay, is not that verdict)."""
    if not_planted_here(row):
        return not any(f[0] == row.expect and names_planted_fix(row, f) for f in row.findings)
    return row.control_clean


def summary(rows: Sequence[Row]) -> dict[str, Any]:
    """The goals' numbers over the rows run so far."""
    planted = [r for r in rows if r.expect and r.status != "skipped" and not not_planted_here(r)]
    controls = [r for r in rows if (not r.expect or not_planted_here(r)) and r.status != "skipped"]
    top_ok, top_n = _share([r.top_right if r.status != "failed" else False for r in planted])
    est_ok, est_n = _share([r.estimate_within for r in planted])
    clean_ok, clean_n = _share([_clean(r) if r.status != "failed" else False for r in controls])
    hogs = list(hog_pairs(rows))
    hog_ok = sum(1 for q, h in hogs if hog_consistent(q, h))
    return {
        "top_right": [top_ok, top_n], "estimate_within": [est_ok, est_n], "controls_clean": [clean_ok, clean_n],
        "hog_consistent": [hog_ok, len(hogs)],
        "goals_met": {
            "top_right": top_n > 0 and top_ok / top_n >= GOAL_TOP_SHARE,
            "estimate_within": est_n > 0 and est_ok / est_n >= GOAL_ESTIMATE_SHARE,
            "controls_clean": clean_n > 0 and clean_ok == clean_n,
            "hog_consistent": bool(hogs) and hog_ok == len(hogs),
        },
    }


def _pct(ok: int, n: int) -> str:
    return f"{ok}/{n} ({ok / n:.0%})" if n else "0/0"


def _budget_note(meta: dict[str, Any]) -> str:
    """The estimate and what a budget left out, for the conditions line."""
    note = ""
    if meta.get("estimated_minutes") is not None:
        note += f"; estimated {meta['estimated_minutes']:.0f} min beforehand"
    skipped = meta.get("skipped_for_budget") or []
    if skipped:
        note += f"; --budget-min {meta.get('budget_min'):g} left out {len(skipped)} rows: {', '.join(skipped)}"
    return note


def render_markdown(rows: Sequence[Row], meta: dict[str, Any]) -> str:
    """The docs/benchmarks.md section: conditions, goals, confusion matrix, estimates, hog, controls."""
    s = summary(rows)
    lines = [
        f"Last run: {meta['date']}, {meta['machine']}, {meta['pairs']} interleaved pairs per row "
        f"{'after a warm-up pair' if meta.get('warmup_pair', True) else '(no warm-up pair)'}, "
        f"{meta['minutes']:.0f} min in all{', QUICK smoke run (not a measurement of the goals)' if meta['quick'] else ''}"
        f"{', only ' + meta['only'] if meta['only'] else ''}"
        f"{', the first row of each scenario' if meta.get('first_rows') else ''}; torch's default threads; 1-min load average "
        f"{meta['load_min']:.1f}-{meta['load_max']:.1f} during the pairs"
        f"{_budget_note(meta)}.",
        f"Command: `{meta['command']}`",
        "",
        "| goal | result | met |",
        "|---|---|---|",
        f"| right top finding >= {GOAL_TOP_SHARE:.0%} | {_pct(*s['top_right'])} | {s['goals_met']['top_right']} |",
        f"| estimate within {ESTIMATE_FACTOR}x on >= {GOAL_ESTIMATE_SHARE:.0%} | {_pct(*s['estimate_within'])} "
        f"| {s['goals_met']['estimate_within']} |",
        "| controls: no finding about the job (beside a hog MACHINE_BUSY only; a row not planted here: its "
        f"finding not named with the fix that measured slower) | {_pct(*s['controls_clean'])} "
        f"| {s['goals_met']['controls_clean']} |",
        f"| same top finding with a hog | {_pct(*s['hog_consistent'])} | {s['goals_met']['hog_consistent']} |",
        "",
        "Confusion matrix (rows: planted mechanism; columns: the doctor's top finding about the job; "
        "beside a hog, MACHINE_BUSY first lets the second finding count):",
        "",
    ]
    judged = [r for r in rows if r.status not in ("skipped", "failed")]
    cols = sorted({job_top(r.findings, r.hog) or "none" for r in judged})
    mechs = sorted({r.mechanism for r in judged})
    lines += ["| planted \\ top | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for m in mechs:
        counts = [sum(1 for r in judged if r.mechanism == m and (job_top(r.findings, r.hog) or "none") == c)
                  for c in cols]
        lines.append(f"| {m} | " + " | ".join(str(c) if c else "" for c in counts) + " |")
    lines += ["", "| scenario | variant | expected | top finding | estimate | measured | spread | within "
              f"{ESTIMATE_FACTOR}x | status |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        est = f"{r.est_speedup:.2f}x" if r.est_speedup is not None else "-"
        meas = f"{r.measured_speedup:.2f}x" if r.measured_speedup is not None else "-"
        spread = f"{r.spread:.0%}" if r.spread is not None else "-"
        within = "-" if r.estimate_within is None else ("yes" if r.estimate_within else "**no**")
        top = ", ".join(f"{f[0]} {f[1]:.2f}x" if isinstance(f[1], (int, float)) else str(f[0]) for f in r.findings[:2])
        if not r.expect or not_planted_here(r):
            clean = _clean(r)
            within = "clean" if clean else ("**not clean**" if clean is False else "-")
        status = r.status + (f": {r.error}" if r.error else "")
        if not_planted_here(r):
            status += " (fix slower in every pair: not planted here, scored as a control)"
        lines.append(f"| `{r.scenario}` | {r.variant} | {r.expect or '(healthy)'} | {top or 'none'} | {est} | {meas} "
                     f"| {spread} | {within} | {status} |")
    hogs = list(hog_pairs(rows))
    if hogs:
        lines += ["", "Beside a hog (the same row without it on the left):", "",
                  "| scenario | row | top without hog | findings with hog | consistent |", "|---|---|---|---|---|"]
        for quiet, hogged in hogs:
            ids = ", ".join(str(f[0]) for f in hogged.findings[:3]) or "none"
            lines.append(f"| `{hogged.scenario}` | {hogged.variant} | {quiet.top_finding or 'none'} | {ids} "
                         f"| {'yes' if hog_consistent(quiet, hogged) else '**no**'} |")
    return "\n".join(lines)


def write_docs(path: Path, markdown: str, begin: str = DOCS_BEGIN, end: str = DOCS_END,
               title: str = "Scenario matrix (`benchmarks/scenarios.py`)") -> None:
    """Replace the block between the ``begin``/``end`` markers (appended as a section ``title`` when absent)."""
    text = path.read_text(encoding="utf-8")
    block = f"{begin}\n{markdown}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + f"\n\n## {title}\n\n" + block + "\n"
    atomic_write_text(path, text)


def select(scenarios: Sequence[Scenario], only: str | None) -> list[Scenario]:
    """Scenarios whose name, mechanism or expected finding matches the glob (or contains it)."""
    if not only:
        return list(scenarios)
    pats = [p if any(ch in p for ch in "*?[") else f"*{p}*" for p in only.split(",")]
    return [s for s in scenarios if any(fnmatch.fnmatch(k, p) for p in pats for k in (s.name, s.mechanism, s.expect))]


def record_stem(row: Row) -> str:
    """The file name stem :func:`measure_row` gives a row's report and record."""
    return f"{row.scenario}-{row.variant.split('/', 1)[0]}-{row.cores}-{int(row.hog)}"


def rejudge(results: Path, records: Path, out: Path, argv: Sequence[str]) -> int:
    """Judge a results file's rows again on the records its run kept, with this checkout's rules."""
    from stave.doctor.facade import diagnose
    from stave.errors import StaveError
    from stave.measure.record import RunRecord

    try:
        saved = json.loads(results.read_text(encoding="utf-8"))
        rows = [Row(**r) for r in saved["rows"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"cannot read the results {results}: {exc}", file=sys.stderr)
        return 2
    missing = []
    for row in rows:
        path = records / f"{record_stem(row)}.rec.json"
        if not path.is_file():
            missing.append(path.name)
            continue
        try:
            result = diagnose([RunRecord.load(path)])
        except StaveError as exc:
            print(f"{path}: {exc}", file=sys.stderr)
            return 2
        row.findings = [[f.id, f.est_speedup, f.severity, sorted(f.evidence.get("model_inputs_changed") or {})]
                        for f in result.findings]
        row.top_finding = row.findings[0][0] if row.findings else None
        row.top_right = row.estimate_within = row.control_clean = row.est_speedup = None
        judge(row)
    if missing:
        print(f"no record for {len(missing)} rows (kept as judged before): {', '.join(missing)}", file=sys.stderr)
    meta = dict(saved["meta"], command="python benchmarks/scenarios.py " + " ".join(argv),
                rejudged_from=str(results))
    atomic_write_json(out, {"schema": "stave.scenarios/1", "meta": meta, "summary": summary(rows),
                            "rows": [asdict(r) for r in rows]})
    print(render_markdown(rows, meta))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the matrix; results to --out after every row, the docs section with --write-docs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", default=str(MATRIX_PATH), help="the registry (default benchmarks/scenarios/"
                        "matrix.toml; the GPU rows are in matrix_gpu.toml)")
    parser.add_argument("--only", metavar="PATTERN", help="scenarios whose name/mechanism/finding matches "
                        "(glob or substring; comma-separated for several)")
    parser.add_argument("--variant", metavar="PATTERN", help="only rows whose label (e.g. 'base/2c/hog') matches "
                        "the glob or contains the text")
    parser.add_argument("--quick", action="store_true", help="2 pairs, quick_steps, the first row of each scenario "
                        "(or the --variant rows): a smoke run")
    parser.add_argument("--first-rows", action="store_true", help="only each scenario's first row (as --quick), "
                        "with the full steps and pairs: the goals' measurement of every scenario once")
    parser.add_argument("--pairs", type=int, help="interleaved pairs per row (default 5; --quick 2)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="results JSON (rewritten after every row)")
    parser.add_argument("--write-docs", action="store_true", help="write the section of docs/benchmarks.md")
    parser.add_argument("--budget-min", type=float, metavar="MIN", help="run the rows in priority order (each "
                        "scenario's first row, then hog, 1-core and other rows; mechanisms taking turns) while "
                        "their estimated runtime fits MIN minutes, re-checked before each row at the pace the rows "
                        "so far have run; the rows left out are listed")
    parser.add_argument("--reports", metavar="DIR", help="keep the doctor's JSON report of each row in DIR "
                        "(the evidence behind a row's verdicts)")
    parser.add_argument("--records", metavar="DIR", help="keep each row's RunRecord (the doctor's measurements) "
                        "in DIR, so a changed rule can be judged again on them without running the row")
    parser.add_argument("--rejudge", metavar="RESULTS", help="run nothing: judge the rows of a results file again "
                        "with this checkout's rules, on the RunRecords that run kept (--records DIR names them); the "
                        "measured speedups stay, the findings and verdicts are new; written to --out")
    parser.add_argument("--list", action="store_true", help="list the rows in run order with their estimated "
                        "runtime, run nothing")
    parser.add_argument("--from-json", metavar="PATH", help="run nothing: render (and with --write-docs write) "
                        "the section from a results file written earlier")
    args = parser.parse_args(argv)
    if args.rejudge:
        if not args.records:
            print("--rejudge needs --records DIR (the RunRecords the run kept)", file=sys.stderr)
            return 2
        return rejudge(Path(args.rejudge), Path(args.records), Path(args.out), argv if argv is not None else sys.argv[1:])
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
        markdown = render_markdown([Row(**r) for r in saved["rows"]], saved["meta"])
        print(markdown)
        if args.write_docs:
            write_docs(DOCS_PATH, markdown)
        return 0
    pairs = args.pairs if args.pairs is not None else (2 if args.quick else MIN_PAIRS_FOR_GOALS)
    if pairs < 1:
        print(f"--pairs must be >= 1, got {pairs}", file=sys.stderr)
        return 2
    try:
        scenarios = select(load_matrix(Path(args.matrix)), args.only)
    except (OSError, tomllib.TOMLDecodeError, KeyError) as exc:
        print(f"cannot read the matrix {args.matrix}: {exc}", file=sys.stderr)
        return 2
    if not scenarios:
        print(f"no scenario matches {args.only!r}", file=sys.stderr)
        return 2
    plan: list[tuple[Scenario, Variant]] = []
    for sc in scenarios:
        missing = missing_modules(sc)
        if missing:
            print(f"skip {sc.name}: {', '.join(missing)} not importable", file=sys.stderr)
            continue
        if sc.device == "cuda" and not gpu_name():
            print(f"skip {sc.name}: needs a CUDA GPU, none is available", file=sys.stderr)
            continue
        variants = list(sc.variants)
        if args.variant:
            pat = args.variant if any(ch in args.variant for ch in "*?[") else f"*{args.variant}*"
            variants = [v for v in variants if fnmatch.fnmatch(v.label, pat)]
        elif args.quick or args.first_rows:
            variants = variants[:1]
        plan += [(sc, v) for v in variants if v.cores <= len(os.sched_getaffinity(0))]
    if args.budget_min is not None and args.budget_min <= 0:
        print(f"--budget-min must be > 0, got {args.budget_min}", file=sys.stderr)
        return 2
    plan = prioritized(plan)
    out_path = Path(args.out)
    for folder in (args.reports, args.records):
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
    history = load_history([*out_path.parent.glob("*.json"), *DEFAULT_OUT.parent.glob("*.json")], scenarios)
    startup = measure_startup_s(core_set(1))

    def row_steps(sc: Scenario) -> int:
        return sc.quick_steps if args.quick else sc.steps

    priced = [estimate_row_s(sc, v, pairs, row_steps(sc), history, startup) for sc, v in plan]
    budget_s = args.budget_min * 60 if args.budget_min is not None else None
    keep, planned_s = within_budget(plan, [p[0] for p in priced], budget_s)
    skipped = [f"{sc.name} {v.label}" for sc, v in plan[keep:]]
    guessed = sum(1 for _, known in priced[:keep] if not known)
    all_s = sum(p[0] for p in priced)
    # The estimate comes first, before anything runs.
    head = (f"plan: {keep} of {len(plan)} rows, estimated {planned_s / 60:.0f} min ({pairs} pairs per row; start-up "
            f"{startup:.1f} s a run; {keep - guessed} rows priced from past runs, {guessed} guessed at "
            f"{GUESS_STEP_S} s a step)")
    if skipped:
        head += (f"; {len(skipped)} rows ({(all_s - planned_s) / 60:.0f} min more) left out by --budget-min "
                 f"{args.budget_min:g}: {', '.join(skipped)}")
    print(head, file=sys.stderr, flush=True)
    if args.list:
        for (sc, v), (est, known) in zip(plan, priced):
            mark = "" if known else " (guess)"
            left = "  [left out]" if f"{sc.name} {v.label}" in skipped else ""
            print(f"{sc.name:28s} {v.label:22s} {sc.mechanism:24s} expect {sc.expect or '(none)':24s} "
                  f"~{est / 60:4.1f} min{mark}{left} {' '.join(v.args)}")
        return 0
    plan = plan[:keep]

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    out_path.parent.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    start = time.perf_counter()
    meta: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{cpu_model()}, {os.cpu_count()} cores, "
                   f"native bf16: {native_bf16_cpu()}"
                   + (f", GPU {gpu_name()}, torch {torch_version()}" if any(sc.device == "cuda" for sc, _ in plan)
                      else ""),
        "pairs": pairs, "quick": args.quick, "only": args.only or "", "first_rows": args.first_rows,
        "estimated_minutes": planned_s / 60, "budget_min": args.budget_min, "skipped_for_budget": skipped,
        "startup_s": startup,
        "warmup_pair": all(sc.warmup_pair for sc, _ in plan),
        "command": "python benchmarks/scenarios.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }

    def save(final: bool) -> None:
        loads = [x for r in rows for x in r.load_avg_1min] or [os.getloadavg()[0]]
        meta.update(minutes=(time.perf_counter() - start) / 60, load_min=min(loads), load_max=max(loads),
                    complete=final, rows_done=len(rows), rows_planned=len(plan))
        atomic_write_json(out_path, {"schema": "stave.scenarios/1", "meta": meta, "summary": summary(rows),
                                     "rows": [asdict(r) for r in rows]})

    console = Console(stderr=True)
    interrupted = False

    def _terminated(signum: int, _frame: object) -> None:
        # SIGTERM (a job scheduler, `kill`) ends the run as Ctrl-C does: the rows so far are saved and
        # a row's hog is stopped. Without this the default action skipped both, and a hog left behind
        # made every later run on the machine read MACHINE_BUSY.
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminated)
    with tempfile.TemporaryDirectory(prefix="stave-scenarios-") as tmp, Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console,
    ) as progress:
        task = progress.add_task("scenarios", total=len(plan))
        try:
            for i, (sc, v) in enumerate(plan):
                elapsed = time.perf_counter() - start
                pace = pace_so_far(rows, priced[:len(rows)])
                if budget_s is not None and rows and elapsed + priced[i][0] * pace > budget_s:
                    # The machine runs slower (or faster) than estimated: the budget holds at run
                    # time too, at the pace the rows so far have shown.
                    left = [f"{x.name} {y.label}" for x, y in plan[i:]]
                    meta["skipped_for_budget"] = left + skipped
                    progress.console.print(f"budget: {elapsed / 60:.0f} min spent at {pace:.1f}x the estimate; "
                                           f"{len(left)} more rows left out: {', '.join(left)}")
                    break
                progress.update(task, description=f"{sc.name} {v.label}")
                steps = row_steps(sc)
                row = measure_row(sc, v, pairs, steps, Path(args.reports) if args.reports else Path(tmp),
                                  Path(args.records) if args.records else None)
                rows.append(row)
                save(final=False)
                progress.console.print(
                    f"{sc.name} {v.label}: top {row.top_finding}, est {row.est_speedup}, measured "
                    f"{row.measured_speedup and round(row.measured_speedup, 2)} (spread "
                    f"{row.spread and round(row.spread, 2)}) {row.status} {row.error} "
                    f"[{row.seconds / 60:.1f} min, estimated {priced[i][0] / 60:.1f}]")
                progress.advance(task)
        except KeyboardInterrupt:
            interrupted = True
    save(final=not interrupted)
    minutes = meta["minutes"]
    markdown = render_markdown(rows, meta)
    print(markdown)
    if args.write_docs:
        write_docs(DOCS_PATH, markdown)
    s = summary(rows)
    console.print(f"{len(rows)}/{len(plan)} rows in {minutes:.1f} min; results in {out_path}")
    for goal, met in s["goals_met"].items():
        console.print(f"goal {goal}: {_pct(*s[goal])} -> {'met' if met else 'NOT met'}"
                      f"{' (quick run: not a measurement)' if pairs < MIN_PAIRS_FOR_GOALS else ''}")
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
