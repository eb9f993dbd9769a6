"""Benchmark: the ladder's kept configuration as a fraction of the best of a grid, same machine, same run.

    python -m benchmarks.ladder_oracle [--out PATH] [--quick] [--no-compile] [--batches 32,64,...]
                                       [--workers 0,1] [--final-rounds N]

The ladder climbs one rung at a time and keeps a rung only when it measurably helps; an oracle
asks how far that greedy climb lands from the best configuration it could have reached. On the
seed workload (``seed-resnet18``) this program:

1. **screen**: times every point of the grid workers x batch x precision x layout (eager), each in
   windows that alternate with a fixed reference (the job as written). A point's speed is the median
   of its window rates over the reference's in the adjacent window, so a change of machine load
   between points cancels (the machine may be shared);
2. **refine**: times the ``REFINE_TOP`` best points of the screen again, all built at once, in more
   rounds;
3. **compile**: torch.compile of the ``COMPILE_TOP`` best eager points only (see ``COMPILE_TOP``);
4. **ladder**: runs ``stave bench ladder`` on the same workload, with its own defaults;
5. **final**: the ladder's kept configuration and the grid's top 3, built at once and timed in
   interleaved rounds (A B C D, then D C B A, ...). The result is the median over rounds of the
   kept configuration's rate over the best grid configuration's (the one of the three with the
   highest median in this round), with a distribution-free interval and each configuration's spread.

Progress goes to stderr; the JSON result (``--out``, default ``benchmarks/results/ladder_oracle.json``)
is rewritten atomically after every stage, so Ctrl-C or a failure keeps what was measured
(``incomplete`` says why). Exit codes: 0 done, 1 a stage failed, 2 bad usage, 130 interrupted.
The goal is a fraction of at least ``GOAL_FRACTION``; the numbers are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "ladder_oracle.json"
SCHEMA = "stave.ladder_oracle/1"

# The goal: the ladder keeps a configuration at least this fast relative to the grid's best.
GOAL_FRACTION = 0.95
# Screen and refine: a window runs at least this long (and one step), so a 32-sample step and a
# 512-sample step are both timed over more than scheduler noise.
WINDOW_S = 1.0
# Untimed steps after a configuration is built: the first step creates oneDNN's primitives.
WARMUP_STEPS = 1
# Windows per point in the screen (each paired with a reference window).
SCREEN_ROUNDS = 2
# Points built at once in the screen: each holds a model, its optimizer state and maybe a worker.
SCREEN_BLOCK = 6
# How many of the screen's best are timed again, and in how many rounds.
REFINE_TOP = 6
REFINE_ROUNDS = 3
# torch.compile only for this many of the best eager points: inductor takes a minute or more per
# configuration on 2 cores, and on this workload compile gained 1.05x in the ladder's runs
# (docs/benchmarks.md); an eager point further than that behind the best cannot overtake it compiled.
COMPILE_TOP = 2
# The final interleaved round: the kept configuration against the grid's best this many.
FINAL_TOP = 3
FINAL_ROUNDS = 6
# Default grid. Batch sizes: the job's own 32 up to 512 (the ladder's batch search may go further;
# whatever it keeps is timed in the final round in any case). Workers: 0 and 1; on a 2-core machine
# 2 workers take the cores the step's own threads use (the ladder tries them; the final round
# includes whatever it keeps).
BATCHES = (32, 64, 128, 256, 512)
WORKERS = (0, 1)
QUICK_BATCHES = (32, 64)
QUICK_WORKERS = (0,)
QUICK_WINDOW_S = 0.1
QUICK_FINAL_ROUNDS = 3


class Runner(Protocol):
    """Builds configurations and times windows of them (the real one: :class:`SessionRunner`)."""

    def open(self, config: Any) -> None:
        """Build ``config`` and run its warm-up steps."""

    def window(self, config: Any) -> float:
        """Time one window of ``config``; its samples/s."""

    def close(self, config: Any) -> None:
        """Free ``config``'s model and workers."""


@dataclass
class Point:
    """One configuration's measurements in one stage."""

    config: Any
    label: str
    ratios: list[float] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    error: str | None = None

    @property
    def ratio(self) -> float | None:
        """Median rate over the reference's (None when it failed or was not timed)."""
        from stave.analyze.stats import median

        return median(self.ratios) if self.ratios and self.error is None else None

    def to_dict(self) -> dict[str, Any]:
        from stave.analyze.stats import median, relative_spread

        out: dict[str, Any] = {"label": self.label, "config": self.config.to_dict()}
        if self.ratios:
            out.update(x_reference=self.ratio, ratios=[round(r, 4) for r in self.ratios],
                       ratio_spread=relative_spread(self.ratios))
        if self.rates:
            out.update(samples_per_s=median(self.rates), window_rates=[round(r, 3) for r in self.rates],
                       spread=relative_spread(self.rates))
        if self.error is not None:
            out["error"] = self.error
        return out


def label(config: Any) -> str:
    """Short name of a configuration: ``batch 256, 1 worker, bf16, channels_last, compile``."""
    parts = [f"batch {config.batch_size}", f"{config.num_workers} worker{'s' if config.num_workers != 1 else ''}",
             config.train.precision]
    if config.train.channels_last:
        parts.append("channels_last")
    if config.train.compile:
        parts.append("compile")
    if config.uint8:
        parts.append("uint8")
    if config.train.optimizer_impl != "default":
        parts.append(config.train.optimizer_impl)
    if config.loader != "torch":
        parts.append(f"loader {config.loader}")
    return ", ".join(parts)


def grid(reference: Any, batches: tuple[int, ...], workers: tuple[int, ...], precisions: tuple[str, ...],
         layouts: tuple[bool, ...]) -> list[Any]:
    """Every eager point: ``reference`` with each combination of the values changed."""
    return [
        reference.with_changes(batch_size=b, num_workers=w, precision=p, channels_last=cl)
        for w, b, p, cl in itertools.product(workers, batches, precisions, layouts)
    ]


# Errors a configuration can raise while built or timed; the point is marked failed and the rest go on.
POINT_ERRORS: tuple[type[BaseException], ...] = (RuntimeError, MemoryError, ValueError)


def _point_errors() -> tuple[type[BaseException], ...]:
    from stave.errors import StaveError

    return POINT_ERRORS + (StaveError,)


def relative(runner: Runner, points: list[Point], reference: Any, rounds: int, say: Callable[[str], None],
             stage: str) -> None:
    """Time ``points`` (already open) in ``rounds`` rounds, each window next to a reference window.

    Within a round the points run in order (reversed every other round) and each pair alternates
    which side goes first, so drift within a pair hits both sides equally over the rounds.
    """
    for r in range(rounds):
        order = points if r % 2 == 0 else list(reversed(points))
        for i, point in enumerate(order):
            if point.error is not None:
                continue
            try:
                if (r + i) % 2 == 0:
                    ref_rate, rate = runner.window(reference), runner.window(point.config)
                else:
                    rate = runner.window(point.config)
                    ref_rate = runner.window(reference)
            except _point_errors() as exc:
                point.error = f"{type(exc).__name__}: {exc}"[:300]
                say(f"  [{stage}] {point.label}: failed ({point.error})")
                continue
            point.rates.append(rate)
            point.ratios.append(rate / ref_rate if ref_rate else 0.0)
        say(f"  [{stage}] round {r + 1}/{rounds}: " + "; ".join(
            f"{p.label} {p.ratios[-1]:.2f}x" for p in points if p.error is None and p.ratios)[:400])


def open_points(runner: Runner, points: list[Point], say: Callable[[str], None], stage: str) -> None:
    """Build and warm each point; a point that fails to build is marked and skipped."""
    for point in points:
        try:
            started = time.perf_counter()
            runner.open(point.config)
            if point.config.train.compile:
                say(f"  [{stage}] {point.label}: built and compiled in {time.perf_counter() - started:.0f} s")
        except _point_errors() as exc:
            point.error = f"{type(exc).__name__}: {exc}"[:300]
            say(f"  [{stage}] {point.label}: failed to build ({point.error})")


def close_points(runner: Runner, points: list[Point], keep: Any) -> None:
    """Free every point's session but ``keep``'s (the reference is a grid point too, open throughout)."""
    for point in points:
        if point.config != keep:
            runner.close(point.config)


def ranked(points: list[Point]) -> list[Point]:
    """Points that were timed, fastest first."""
    return sorted((p for p in points if p.ratio is not None), key=lambda p: p.ratio or 0.0, reverse=True)


@dataclass(frozen=True)
class GridPlan:
    """What to time: the grid, the reference, rounds, and what was left out and why."""

    reference: Any
    points: tuple[Any, ...]
    compile: bool
    final_rounds: int
    skipped: tuple[str, ...] = ()
    screen_rounds: int = SCREEN_ROUNDS
    refine_top: int = REFINE_TOP
    refine_rounds: int = REFINE_ROUNDS


class Oracle:
    """The stages, in order; ``record`` is called with the whole result after each of them."""

    def __init__(self, runner: Runner, plan: GridPlan, climb: Callable[[], Any],
                 record: Callable[[dict[str, Any]], None], say: Callable[[str], None]) -> None:
        self.runner = runner
        self.plan = plan
        self.climb = climb
        self.record = record
        self.say = say
        self.doc: dict[str, Any] = {"stages": {}, "incomplete": None}
        self.best_grid: list[Point] = []

    def _stage_done(self, name: str, started: float, extra: dict[str, Any]) -> None:
        self.doc["stages"][name] = {"duration_s": round(time.perf_counter() - started, 1),
                                    "load_avg_1m_after": _load(), **extra}
        self.record(self.doc)

    def run(self) -> dict[str, Any]:
        """All stages; returns the result (also handed to ``record`` after each stage)."""
        runner, plan, say = self.runner, self.plan, self.say
        runner.open(plan.reference)
        try:
            screened = self.screen()
            eager = self.refine(screened)
            compiled = self.compiled(eager)
            self.best_grid = ranked(eager + compiled)
            kept = self.ladder()
            self.final(kept)
        finally:
            runner.close(plan.reference)
        return self.doc

    def _time(self, points: list[Point], rounds: int, stage: str) -> None:
        """Build ``points``, time them beside the reference for ``rounds`` rounds, free them."""
        open_points(self.runner, points, self.say, stage)
        try:
            relative(self.runner, points, self.plan.reference, rounds, self.say, stage)
        finally:
            close_points(self.runner, points, self.plan.reference)

    def screen(self) -> list[Point]:
        plan, say = self.plan, self.say
        started = time.perf_counter()
        points = [Point(c, label(c)) for c in plan.points]
        say(f"screen: {len(points)} grid points, {plan.screen_rounds} windows each beside the reference")
        for start in range(0, len(points), SCREEN_BLOCK):
            block = points[start:start + SCREEN_BLOCK]
            say(f"  [screen] points {start + 1}-{start + len(block)} of {len(points)}")
            self._time(block, plan.screen_rounds, "screen")
            self._stage_done("screen", started, {"points": [p.to_dict() for p in points]})
        return points

    def refine(self, screened: list[Point]) -> list[Point]:
        started = time.perf_counter()
        top = [Point(p.config, p.label) for p in ranked(screened)[:self.plan.refine_top]]
        self.say(f"refine: the screen's best {len(top)}, {self.plan.refine_rounds} rounds")
        self._time(top, self.plan.refine_rounds, "refine")
        self._stage_done("refine", started, {"points": [p.to_dict() for p in top]})
        return top

    def compiled(self, eager: list[Point]) -> list[Point]:
        if not self.plan.compile:
            self.doc["stages"]["compile"] = {"skipped": "compile left out of the grid (--no-compile or --quick)"}
            return []
        started = time.perf_counter()
        points = [Point(c, label(c)) for c in
                  (p.config.with_changes(compile=True) for p in ranked(eager)[:COMPILE_TOP])]
        self.say(f"compile: torch.compile of the {len(points)} best eager points (a minute or more each to compile)")
        self._time(points, self.plan.refine_rounds, "compile")
        self._stage_done("compile", started, {"points": [p.to_dict() for p in points]})
        return points

    def ladder(self) -> Any:
        started = time.perf_counter()
        self.say("ladder: stave bench ladder on the same workload (its own defaults)")
        kept, summary = self.climb()
        self._stage_done("ladder", started, {"kept": label(kept), "kept_config": kept.to_dict(), **summary})
        return kept

    def final(self, kept: Any) -> None:
        from stave.analyze.stats import median
        from stave.bench.compare import median_interval

        plan, say = self.plan, self.say
        started = time.perf_counter()
        contenders = [Point(kept, label(kept))]
        for p in self.best_grid[:FINAL_TOP]:
            if p.config != kept:
                contenders.append(Point(p.config, p.label))
        say(f"final: the ladder's {contenders[0].label} against the grid's top {FINAL_TOP}, "
            f"{plan.final_rounds} interleaved rounds")
        open_points(self.runner, contenders, say, "final")
        try:
            for r in range(plan.final_rounds):
                order = contenders if r % 2 == 0 else list(reversed(contenders))
                for point in order:
                    if point.error is not None:
                        continue
                    try:
                        point.rates.append(self.runner.window(point.config))
                    except _point_errors() as exc:
                        point.error = f"{type(exc).__name__}: {exc}"[:300]
                        say(f"  [final] {point.label}: failed ({point.error})")
                say(f"  [final] round {r + 1}/{plan.final_rounds}: " + "; ".join(
                    f"{p.label} {p.rates[-1]:.1f}/s" for p in contenders if p.error is None and p.rates))
        finally:
            close_points(self.runner, contenders, plan.reference)
        ladder_point, grid_points = contenders[0], [p for p in contenders[1:] if p.error is None and p.rates]
        if kept in {p.config for p in self.best_grid[:FINAL_TOP]}:
            grid_points.append(ladder_point)  # the ladder kept one of the grid's top 3 itself
        final: dict[str, Any] = {"contenders": [p.to_dict() for p in contenders], "rounds": plan.final_rounds}
        if ladder_point.error is None and ladder_point.rates and grid_points:
            best = max(grid_points, key=lambda p: median(p.rates))
            rounds = min(len(ladder_point.rates), len(best.rates))
            per_round = [ladder_point.rates[i] / best.rates[i] for i in range(rounds) if best.rates[i]]
            lo, hi = median_interval(per_round)
            fraction = median(per_round)
            final.update(
                best_grid=best.label,
                fraction=fraction,
                fraction_interval=[lo, hi],
                fraction_per_round=per_round,
                goal=GOAL_FRACTION,
                goal_met=fraction >= GOAL_FRACTION,
            )
        self.doc["fraction"] = final.get("fraction")
        self._stage_done("final", started, final)

    def headline(self) -> str:
        """One line: the fraction, its interval, and the goal."""
        final = self.doc["stages"].get("final", {})
        if final.get("fraction") is None:
            return "ladder oracle: no fraction (the final round did not time both sides)"
        lo, hi = final["fraction_interval"]
        verdict = "met" if final["goal_met"] else "NOT met"
        return (f"ladder oracle: the ladder's kept configuration runs at {final['fraction']:.3f} "
                f"({lo:.3f}-{hi:.3f}) of the grid's best ({final['best_grid']}); goal >= {GOAL_FRACTION}: {verdict}")


DOCS_BEGIN = "<!-- ladder-oracle:begin -->"
DOCS_END = "<!-- ladder-oracle:end -->"
DOCS_PATH = ROOT / "docs" / "benchmarks.md"


def docs_markdown(doc: dict[str, Any]) -> str:
    """The docs/benchmarks.md block for one result: command, machine and load, the grid, the final round."""
    machine, grid, stages = doc.get("machine", {}), doc.get("grid", {}), doc.get("stages", {})
    loads = [machine.get("load_avg_1m")] + [st.get("load_avg_1m_after") for st in stages.values()
                                            if isinstance(st, dict)]
    loads = [v for v in loads if v is not None]
    lines = [
        f"Command: `{doc.get('command', 'python -m benchmarks.ladder_oracle')}` (started {doc.get('started_utc', '?')}, "
        f"{(doc.get('duration_s') or 0) / 60:.0f} minutes; JSON in `benchmarks/results/ladder_oracle.json`).",
        f"Machine: {machine.get('device_name', '?')}, {machine.get('cores_usable', '?')} usable cores, "
        f"torch {machine.get('torch', '?')}, native bf16: {machine.get('bf16_native')}. "
        f"Load average (1 min) from {min(loads, default=0):.1f} to {max(loads, default=0):.1f} over the run"
        # The run's own load reaches the cores plus a worker (its threads and one loader worker):
        # only beyond half again the cores did other work share the machine.
        + (" (a shared machine: the numbers are noisy)." if max(loads, default=0) > 1.5 * (machine.get("cores_usable") or 1)
           else "."),
        "",
        f"Grid: {grid.get('points', '?')} eager points (workers x batch x precision x layout) around the job as "
        f"written ({grid.get('reference', '?')}), screened in {grid.get('screen_rounds')} windows of >= "
        f"{grid.get('window_s')} s each beside the reference, the best {grid.get('refine_top')} refined in "
        f"{grid.get('refine_rounds')} rounds, torch.compile of the best {grid.get('compile_top')}. Left out: "
        + "; ".join(grid.get("skipped", [])) + ".",
    ]
    timed = [p for name in ("refine", "compile") for p in (stages.get(name) or {}).get("points", [])
             if p.get("x_reference") is not None]
    if timed:
        best = sorted(timed, key=lambda p: p["x_reference"], reverse=True)[:FINAL_TOP]
        lines += ["", "The grid's best (refine and compile stages; samples/s over the reference's in adjacent "
                      "windows, median): " + "; ".join(f"{p['label']} {p['x_reference']:.2f}x" for p in best) + "."]
    ladder = stages.get("ladder")
    if ladder:
        speed = ladder.get("best_speedup")
        kept_rungs = ", ".join(ladder.get("kept_rungs") or []) or "none"
        side = f"{speed:.2f}x the baseline side by side; " if speed is not None else ""
        kept = ladder.get("kept") or f"so far (stopped before its end) {ladder.get('kept_so_far')}"
        lines += ["", f"Ladder (its defaults, same process): kept {kept} (rungs kept: {kept_rungs}; "
                      f"{side}{(ladder.get('ladder_duration_s') or 0) / 60:.0f} minutes)."]
    final = stages.get("final")
    if final:
        lines += ["", f"Final round ({final.get('rounds')} interleaved rounds, median samples/s and spread "
                  "(max-min)/median of the windows):", "",
                  "| | configuration | samples/s | spread |", "|---|---|---|---|"]
        for i, c in enumerate(final.get("contenders", [])):
            who = "ladder's kept" if i == 0 else "grid"
            rate = c.get("samples_per_s")
            lines.append(f"| {who} | {c['label']} | {rate:.1f} | {c.get('spread', 0):.0%} |" if rate is not None
                         else f"| {who} | {c['label']} | failed: {c.get('error', '?')} | |")
        if final.get("fraction") is not None:
            lo, hi = final["fraction_interval"]
            verdict = "met" if final["goal_met"] else "**not met**"
            lines += ["", f"**The ladder's kept configuration runs at {final['fraction']:.3f} of the grid's best** "
                      f"({final['best_grid']}; interval {lo:.3f}-{hi:.3f} over the rounds' ratios). "
                      f"Goal >= {GOAL_FRACTION}: {verdict}."]
    fraction_measured = bool(final) and final.get("fraction") is not None
    if not fraction_measured and ladder and ladder.get("best_speedup") and timed:
        # The ladder's side-by-side speedup is over its baseline, the job as written: the grid's reference.
        top = max(p["x_reference"] for p in timed)
        lines += ["", f"Indirect estimate, without the final round: the ladder's {ladder['best_speedup']:.2f}x over "
                      f"the job as written against the grid's best {top:.2f}x over the same configuration = "
                      f"{ladder['best_speedup'] / top:.2f} (windows timed at different times: not the goal's measure)."]
    if doc.get("incomplete"):
        lines += ["", f"Incomplete: {doc['incomplete']}."]
    return "\n".join(lines)


def write_docs(doc: dict[str, Any], path: Path = DOCS_PATH) -> None:
    """Replace the oracle's block in docs/benchmarks.md (a new section when the markers are absent)."""
    from benchmarks.scenarios import write_docs as replace_block

    replace_block(path, docs_markdown(doc), DOCS_BEGIN, DOCS_END, title="Ladder oracle (`benchmarks/ladder_oracle.py`)")


def ladder_summary(result: Any) -> dict[str, Any]:
    """What the oracle keeps of a ladder result: its speedup, the rungs it kept (with their ratios), duration."""
    kept = [f"{r.name} ({r.chosen.label}, {r.chosen.ratio:.2f}x)" if r.chosen is not None and r.chosen.ratio
            else r.name for r in result.rungs if r.status == "kept"]
    return {"best_speedup": result.best_speedup, "kept_rungs": kept, "chain_speedup": result.chain_speedup,
            "ladder_duration_s": round(result.duration_s, 1), "incomplete": result.incomplete}


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _load() -> float | None:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


class SessionRunner:
    """The real runner: one :class:`stave.bench.session.Session` per configuration, as the ladder times them."""

    def __init__(self, spec: Any, device: Any, window_s: float, seed: int = 0) -> None:
        import torch

        from stave.bench.pipeline import image_inputs

        self.spec, self.device, self.window_s, self.seed = spec, device, window_s, seed
        torch.manual_seed(seed)
        model = spec.model()
        self.initial_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.image_inputs = image_inputs(spec, model)
        self.sessions: dict[Any, Any] = {}

    def open(self, config: Any) -> None:
        from stave.bench.session import Session

        if config in self.sessions:
            return
        session = Session(self.spec, config, self.device, self.initial_state,
                          self.image_inputs and config.train.channels_last, seed=self.seed)
        self.sessions[config] = session
        try:
            session.run_steps(WARMUP_STEPS)
        except BaseException:
            self.close(config)
            raise

    def window(self, config: Any) -> float:
        return self.sessions[config].window(1, self.window_s).samples_per_s

    def close(self, config: Any) -> None:
        session = self.sessions.pop(config, None)
        if session is not None:
            session.close()


def _ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise SystemExit(f"stave: error: {flag} takes comma-separated integers, got {text!r}") from None
    if not values or any(v < 0 for v in values):
        raise SystemExit(f"stave: error: {flag} takes non-negative integers, got {text!r}")
    return values


def build_plan(args: argparse.Namespace, spec: Any, device: Any, image_inputs: bool) -> GridPlan:
    """The grid for this machine: precisions it has, layouts the model uses, compile or not."""
    from stave.bench.settings import RunConfig
    from stave.train.config import TrainConfig
    from stave.train.precision import best_precision

    reference = RunConfig(batch_size=spec.batch_size, num_workers=spec.num_workers,
                          train=TrainConfig(set_to_none=spec.set_to_none))
    skipped = []
    reduced, why = best_precision(device)
    precisions = ("fp32",) + ((reduced,) if reduced else ())
    if reduced is None:
        skipped.append(f"reduced precision: {why}")
    layouts = (False, True) if image_inputs else (False,)
    batches = args.batches or (QUICK_BATCHES if args.quick else BATCHES)
    cap = len(spec.dataset) // 4  # the ladder's own cap: a quarter of the dataset
    too_big = [b for b in batches if b > cap or b < 1]
    if too_big:
        skipped.append(f"batch sizes {too_big}: above a quarter of the {len(spec.dataset)}-sample dataset")
    batches = tuple(b for b in batches if b not in too_big)
    workers = args.workers or (QUICK_WORKERS if args.quick else WORKERS)
    skipped.append(f"workers above {max(workers)}: on {os.cpu_count()} cores more workers take the cores of the "
                   "step's own threads (the ladder tries them; the final round times whatever it keeps)")
    compile_on = not (args.no_compile or args.quick)
    if compile_on:
        skipped.append(f"torch.compile only of the {COMPILE_TOP} best eager points (a minute or more to compile "
                       "each on this CPU; compile gained 1.05x in the ladder's runs on this workload)")
    else:
        skipped.append("torch.compile: left out (--no-compile or --quick)")
    points = grid(reference, batches, workers, precisions, layouts)
    final_rounds = args.final_rounds or (QUICK_FINAL_ROUNDS if args.quick else FINAL_ROUNDS)
    if args.quick:
        return GridPlan(reference, tuple(points), compile_on, final_rounds, tuple(skipped), screen_rounds=1,
                    refine_top=3, refine_rounds=1)
    return GridPlan(reference, tuple(points), compile_on, final_rounds, tuple(skipped))


def main(argv: list[str] | None = None) -> int:
    """Run the oracle; the JSON result is rewritten after every stage."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ladder_oracle", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"result JSON (default {DEFAULT_OUT})")
    parser.add_argument("--quick", action="store_true", help="32 px, a 4-point grid, the --quick ladder: a smoke test")
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out of the grid")
    parser.add_argument("--batches", type=lambda t: _ints(t, "--batches"), default=None,
                        help=f"batch sizes of the grid (default {','.join(map(str, BATCHES))})")
    parser.add_argument("--workers", type=lambda t: _ints(t, "--workers"), default=None,
                        help=f"worker counts of the grid (default {','.join(map(str, WORKERS))})")
    parser.add_argument("--final-rounds", type=int, default=None, help=f"rounds of the final (default {FINAL_ROUNDS})")
    parser.add_argument("--write-docs", action="store_true",
                        help="write the result into docs/benchmarks.md between the ladder-oracle markers")
    parser.add_argument("--docs-from", type=Path, metavar="JSON",
                        help="only write docs/benchmarks.md's block from a result written earlier (no timing)")
    args = parser.parse_args(argv)
    if args.docs_from is not None:
        import json

        try:
            write_docs(json.loads(args.docs_from.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            parser.error(f"--docs-from {args.docs_from}: {exc}")
        return 0
    if args.final_rounds is not None and args.final_rounds < 3:
        parser.error("--final-rounds must be at least 3")

    from benchmarks.console import error_line, progress, result_line
    from stave import device as dev
    from stave.bench.final import machine_facts
    from stave.bench.ladder import LadderOptions, run_ladder
    from stave.bench.result import LadderIncomplete
    from stave.bench.workloads import build_workload
    from stave.errors import StaveError
    from stave.files import atomic_write_json, check_writable

    try:
        check_writable(str(args.out), "--out")
    except StaveError as exc:
        error_line(str(exc))
        return 2
    device = dev.resolve_device(None)
    spec = build_workload("seed-resnet18", quick=args.quick)
    runner = SessionRunner(spec, device, QUICK_WINDOW_S if args.quick else WINDOW_S)
    plan = build_plan(args, spec, device, runner.image_inputs)
    started = time.perf_counter()
    header = {
        "schema": SCHEMA,
        "command": " ".join(["python -m benchmarks.ladder_oracle", *(argv if argv is not None else sys.argv[1:])]),
        "workload": spec.name,
        "description": spec.description,
        "machine": machine_facts(device),
        "grid": {"points": len(plan.points), "reference": label(plan.reference), "skipped": list(plan.skipped),
                 "window_s": runner.window_s, "screen_rounds": plan.screen_rounds,
                 "refine_top": plan.refine_top, "refine_rounds": plan.refine_rounds,
                 "compile_top": COMPILE_TOP if plan.compile else 0, "final_top": FINAL_TOP,
                 "final_rounds": plan.final_rounds},
        "goal_fraction": GOAL_FRACTION,
        "started_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }

    def record(doc: dict[str, Any]) -> None:
        atomic_write_json(args.out, {**header, **doc, "duration_s": round(time.perf_counter() - started, 1),
                                     "load_avg_1m_end": _load()})

    def climb() -> tuple[Any, dict[str, Any]]:
        timing = LadderOptions.quick_timing() if args.quick else LadderOptions().timing
        options = LadderOptions(device=str(device), quick=args.quick, timing=timing)
        try:
            result = run_ladder(spec, options, progress=lambda m: progress("  [ladder] " + m))
        except LadderIncomplete as stopped:
            if isinstance(stopped.cause, KeyboardInterrupt):
                # Keep the rungs climbed so far in the result before stopping.
                oracle.doc["stages"]["ladder"] = {"kept_so_far": label(stopped.result.final),
                                                  **ladder_summary(stopped.result)}
                raise stopped.cause from None
            # A failed rung late in the climb: the configuration kept so far still answers the question.
            result = stopped.result
        return result.final, ladder_summary(result)

    progress(f"ladder oracle on {spec.name}: {len(plan.points)} grid points; results to {args.out}")
    for note in plan.skipped:
        progress(f"  grid: {note}")
    load = header["machine"].get("load_avg_1m")
    if load is not None and load > (header["machine"].get("cores_usable") or 1) / 2:
        progress(f"  note: load average {load:.1f} at the start: other work shares this machine")
    oracle = Oracle(runner, plan, climb, record, progress)
    # A run in the background (nohup, a scheduler) is stopped with SIGTERM, and a shell's background
    # job ignores SIGINT: both keep what was measured, as Ctrl-C does.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        oracle.run()
    except KeyboardInterrupt:
        oracle.doc["incomplete"] = "interrupted (Ctrl-C)"
        record(oracle.doc)
        progress(f"interrupted: the stages measured so far are in {args.out}")
        return 130
    except _point_errors() as exc:
        oracle.doc["incomplete"] = f"{type(exc).__name__}: {exc}"[:300]
        record(oracle.doc)
        error_line(f"the oracle stopped: {oracle.doc['incomplete']}; the stages measured so far are in {args.out}")
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    result_line(oracle.headline())
    if args.write_docs:
        write_docs({**header, **oracle.doc, "duration_s": round(time.perf_counter() - started, 1)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
