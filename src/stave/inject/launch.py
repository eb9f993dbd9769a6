"""The parent side: run a script with a selection of fixes in a child process and read its result.

Each run is a fresh ``python -m stave.inject.child`` process in the caller's working directory, so
runs do not share warmed caches, thread pools or compiled code, and a fix that crashes the script
crashes only its child. The script's stdout goes to a log file beside the result; the tail of its
stderr is kept for the report of a run that failed.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import stave
from stave.capture.runner import Target
from stave.inject.child import DEFAULT_LOSS_STEPS
from stave.inject.selection import Selection

# Characters of the child's stderr kept for the report of a failed run.
STDERR_TAIL_CHARS = 2000


@dataclass(frozen=True)
class ChildRun:
    """One run: the target, the fixes, the step budget (None: to the end), seed and time limit."""

    target: Target
    selection: Selection = field(default_factory=Selection)
    steps: int | None = None
    loss_steps: int = DEFAULT_LOSS_STEPS
    seed: int = 0
    timeout_s: float | None = None
    # Round the model's initial weights to bf16: the loss check's yardstick run (stave.inject.perturb).
    perturb_bf16: bool = False

    def command(self, out_path: str) -> list[str]:
        """The child's command line."""
        cmd = [sys.executable, "-m", "stave.inject.child", "--out", out_path, "--fixes", self.selection.to_json(),
               "--loss-steps", str(self.loss_steps), "--seed", str(self.seed)]
        if self.steps is not None:
            cmd += ["--steps", str(self.steps)]
        if self.perturb_bf16:
            cmd.append("--perturb-bf16")
        if self.target.module:
            cmd.append("-m")
        return cmd + ["--", self.target.name, *self.target.args]


@dataclass
class ChildResult:
    """What one child run measured, and how it ended. ``ok``: the script reached its step budget or
    its end with exit code 0. Times are seconds since the fixes were installed."""

    exit_code: int
    stopped_by: str
    error: str | None = None
    step_end_s: list[float] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    input_stats: list[list[float]] | None = None
    fixes: list[dict[str, Any]] = field(default_factory=list)
    stderr_tail: str = ""
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        """The script ran to its budget or end without an error."""
        return self.exit_code == 0 and self.stopped_by in ("steps", "end", "exit")

    def failure_text(self, when: str = "") -> str:
        """One line saying how the script failed: its error, else its last stderr line, else its exit code."""
        last = [line for line in self.stderr_tail.strip().splitlines() if line.strip()]
        detail = self.error or (last[-1] if last else f"exit code {self.exit_code}")
        return f"the script failed{' ' + when if when else ''}: {detail}"

    def step_times_s(self, warmup: int = 0) -> list[float]:
        """Durations of the steps after the first ``warmup`` (a step spans two step ends)."""
        ends = self.step_end_s
        return [b - a for a, b in zip(ends[warmup:], ends[warmup + 1:])] if warmup >= 0 else []

    def median_step_s(self, warmup: int = 0) -> float | None:
        """Median step time after ``warmup`` steps (None with fewer than two timed steps)."""
        times = self.step_times_s(warmup)
        return statistics.median(times) if len(times) >= 2 else None

    def mean_step_s(self, warmup: int = 0) -> float | None:
        """Mean step time after ``warmup`` steps: it keeps the once-per-epoch stalls a median drops."""
        times = self.step_times_s(warmup)
        return sum(times) / len(times) if len(times) >= 2 else None

    def samples_per_s(self, warmup: int = 0) -> float | None:
        """Samples per second over the steps after ``warmup`` (None when unknown)."""
        ends = self.step_end_s
        if len(ends) < warmup + 2:
            return None
        span = ends[-1] - ends[warmup]
        samples = sum(self.samples[warmup + 1:])
        return samples / span if span > 0 and samples > 0 else None

    @classmethod
    def from_dict(cls, data: dict[str, Any], stderr_tail: str = "") -> "ChildResult":
        """Read the child's result file's content (stave's own file; types checked, no eval)."""
        def floats(key: str) -> list[float]:
            return [float(v) for v in data.get(key) or [] if isinstance(v, (int, float))]

        def losses() -> list[float]:
            # None is a loss that was not finite (JSON has no NaN): it stays in its place as NaN.
            return [float(v) if isinstance(v, (int, float)) else math.nan for v in data.get("losses") or []
                    if v is None or isinstance(v, (int, float))]

        stats = data.get("input_stats")
        if isinstance(stats, list):
            rows = [r for r in stats if isinstance(r, list) and len(r) == 2]
            stats = [[math.nan if v is None else float(v) for v in r] for r in rows] if len(rows) == len(stats) else None
        return cls(
            exit_code=int(data.get("exit_code", 1)),
            stopped_by=str(data.get("stopped_by", "error")),
            error=data.get("error") if isinstance(data.get("error"), str) else None,
            step_end_s=floats("step_end_s"),
            samples=[int(v) for v in data.get("samples") or []],
            losses=losses(),
            input_stats=stats if isinstance(stats, list) else None,
            fixes=[f for f in data.get("fixes") or [] if isinstance(f, dict)],
            stderr_tail=stderr_tail,
            wall_s=float(data.get("wall_s", 0.0)),
        )


def child_env() -> dict[str, str]:
    """The environment of a child: this one, with this stave first on the path."""
    env = dict(os.environ)
    src = str(Path(stave.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([src, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return env


def run_child(run: ChildRun, work_dir: str | os.PathLike[str], name: str = "run") -> ChildResult:
    """Run ``run`` in a child process; its files go to ``work_dir`` (``name``.json, ``name``.log).

    A child that dies without a result (killed, out of memory, past ``timeout_s``) gives a result
    with ``ok`` False and the reason in ``error``. Ctrl-C stops the child and re-raises.
    """
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    out_path, log_path = work / f"{name}.json", work / f"{name}.log"
    out_path.unlink(missing_ok=True)
    started = time.perf_counter()
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(run.command(str(out_path)), stdout=log_file, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, env=child_env())
        try:
            _, err = proc.communicate(timeout=run.timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            tail = err.decode(errors="replace")[-STDERR_TAIL_CHARS:]
            return ChildResult(124, "timeout", f"stopped after {run.timeout_s:.0f} s (time limit)", stderr_tail=tail,
                               wall_s=time.perf_counter() - started)
        except KeyboardInterrupt:
            proc.kill()
            proc.wait()
            raise
    tail = err.decode(errors="replace")[-STDERR_TAIL_CHARS:]
    try:
        data = json.loads(out_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ChildResult(proc.returncode or 1, "crash",
                           f"the run ended with exit code {proc.returncode} and left no result", stderr_tail=tail,
                           wall_s=time.perf_counter() - started)
    return ChildResult.from_dict(data, tail)
