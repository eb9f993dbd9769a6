"""``stave bench ladder`` (the optimization ladder) and ``stave bench data`` (the data benchmark).

``stave bench ladder [--workload NAME | --job MODULE:FUNCTION] [--json PATH] [--html PATH]
[--png PATH] [--steps N] [--quick]`` climbs the ladder and prints one row per rung, the summary
and the final configuration as code (stdout); progress goes to stderr. ``stave bench ladder
[OPTIONS] SCRIPT [ARGS...]`` climbs the injectable fixes on the user's unmodified script instead
(everything after SCRIPT is the script's). Exit codes: 0 ok, 2 bad usage or input, 130 Ctrl-C.
``stave bench data`` is ``stave.data.benchmark`` (see docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

from stave.cli.common import check_outputs
from stave.errors import UsageError

# Width of the table when stdout is not a terminal (a file, a pipe, CI logs).
TABLE_WIDTH = 150


def register(sub: Any) -> None:
    """Add ``bench`` with its ``ladder`` and ``data`` subcommands."""
    p = sub.add_parser(
        "bench",
        help="benchmarks on this machine: the optimization ladder, data loading",
        description="Benchmarks measured on this machine.",
    )
    inner = p.add_subparsers(dest="bench_command", metavar="BENCHMARK")
    inner.required = True
    ladder = inner.add_parser(
        "ladder",
        help="climb the optimization ladder for a workload, your own job, or your unmodified script",
        description="Apply each optimization on top of the kept ones; keep it only if it is faster beyond "
        "the measured noise and its losses match the reference. With SCRIPT: the fixes stave can inject "
        "into the unmodified script, each window one run of the script (docs/bench.md).",
        usage="stave bench ladder [OPTIONS] [SCRIPT [ARGS...]]",
    )
    add_ladder_arguments(ladder)
    ladder.add_argument(
        "--allow-learning-changes",
        action="store_true",
        help="with SCRIPT: also try fixes that change what is learned per step (batch size); reported as such",
    )
    ladder.add_argument("target", nargs=argparse.REMAINDER, help="a training script and its arguments")
    ladder.add_argument("--json", metavar="PATH", help="write the result as JSON (schema stave.bench/1; "
                        "stave.bench.script/1 for a script)")
    ladder.add_argument("--html", metavar="PATH", help="write a self-contained HTML report with the chart")
    ladder.add_argument("--png", metavar="PATH", help="write the chart as PNG")
    ladder.add_argument("--quiet", action="store_true", help="no table on stdout and no progress on stderr")
    ladder.set_defaults(func=run_ladder_command)
    p.set_defaults(split_target=split_target)
    # Its options belong to stave.data.benchmark, imported only when run: "+" as the prefix makes
    # this parser pass every "-..." argument (--help included) through untouched.
    data = inner.add_parser(
        "data",
        help="data-loading benchmark (stave.data vs torchvision, LMDB, HDF5)",
        description="The stave.data benchmark (docs/benchmarks.md).",
        add_help=False,
        prefix_chars="+",
    )
    data.add_argument("data_args", nargs="*", help="options of the data benchmark (see --help)")
    data.set_defaults(func=run_data_command)


def split_target(parser: argparse.ArgumentParser, tokens: list[str]) -> tuple[list[str], list[str]]:
    """``stave bench ladder [OPTIONS] SCRIPT ARGS``: everything from SCRIPT on is the script's (as with
    ``stave doctor``); the other benchmarks take their tokens as they are."""
    from stave.cli.doctor import split_target as split_at_script

    if not tokens or tokens[0] != "ladder":
        return tokens, []
    inner = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    own, script = split_at_script(inner.choices["ladder"], tokens[1:])
    return ["ladder", *own], script


def add_ladder_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by ``stave bench ladder`` and ``stave tune``."""
    from stave.bench.workloads import WORKLOADS

    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--workload", choices=sorted(WORKLOADS), default=None, help="built-in workload (default: seed-resnet18)"
    )
    which.add_argument(
        "--job",
        metavar="MODULE:FUNCTION",
        help="your own job: FUNCTION() returns a stave.bench.JobSpec (docs/bench.md)",
    )
    parser.add_argument(
        "--size",
        type=int,
        default=None,
        help="image side (seed-resnet18: 64, the seed's original is 224) or block size (gpt-char)",
    )
    parser.add_argument(
        "--steps", type=int, default=None, metavar="N", help="minimum steps per timing window (default 2; --quick 1)"
    )
    parser.add_argument(
        "--window-s",
        type=float,
        default=None,
        metavar="S",
        help="minimum seconds per timing window (default 2.0; --quick 0.1)",
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=None,
        metavar="N",
        help="interleaved windows per configuration, at least 3 (default 4; --quick 3)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small sizes, short windows, no torch.compile: seconds to minutes, for a smoke test",
    )
    parser.add_argument(
        "--rungs",
        metavar="NAME,...",
        default=None,
        help="climb only these rungs, in ladder order (names as in the JSON: workers, batch_size, "
        "uint8, autocast, channels_last, optimizer, compile, ...)",
    )
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 (default: cuda when present)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the initial weights and data order")


def ladder_from_args(args: argparse.Namespace, progress: Callable[[str], None]) -> Any:
    """Build the job and options from parsed arguments and climb the ladder."""
    from stave.bench.compare import TimingPlan
    from stave.bench.ladder import LadderOptions, run_ladder
    from stave.bench.workloads import build_workload, load_job

    if args.size is not None and args.size < 1:
        raise UsageError(f"--size must be a positive int, got {args.size}")
    if args.job:
        if args.size is not None:
            raise UsageError("--size applies to built-in workloads; size your own job in its spec")
        spec = load_job(args.job)
    else:
        spec = build_workload(args.workload or "seed-resnet18", size=args.size, quick=args.quick)
    base = LadderOptions.quick_timing() if args.quick else TimingPlan()
    pairs = args.pairs if args.pairs is not None else base.pairs
    timing = TimingPlan(
        warmup_steps=base.warmup_steps,
        pairs=pairs,
        max_pairs=max(base.max_pairs, pairs),
        min_steps=args.steps if args.steps is not None else base.min_steps,
        min_s=args.window_s if args.window_s is not None else base.min_s,
    )
    options = LadderOptions(device=args.device, quick=args.quick, timing=timing, seed=args.seed)
    return run_ladder(spec, options, rungs=_chosen_rungs(spec, args.rungs), progress=progress)


def _chosen_rungs(spec: Any, names: str | None) -> Any:
    """The default rungs, or only those named in ``--rungs`` (in ladder order)."""
    from stave.bench.rungs import default_rungs

    rungs = default_rungs(spec)
    if names is None:
        return rungs
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = [r.name for r in rungs]
    unknown = [n for n in wanted if n not in known]
    if unknown or not wanted:
        raise UsageError(
            f"--rungs: unknown rung(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(known)}"
        )
    return [r for r in rungs if r.name in wanted]


# Options of the in-process ladder that mean nothing for a script's child runs.
NOT_FOR_SCRIPTS = (("workload", "--workload"), ("job", "--job"), ("size", "--size"), ("window_s", "--window-s"),
                   ("device", "--device"), ("html", "--html"), ("png", "--png"))


def _script_tokens(args: argparse.Namespace) -> list[str]:
    """The script and its arguments (the ``--`` the splitter put before them left out)."""
    rest = list(getattr(args, "target", None) or [])
    return rest[1:] if rest[:1] == ["--"] else rest


def script_ladder_from_args(args: argparse.Namespace, progress: Callable[[str], None]) -> Any:
    """The ladder over injectable fixes on the script in ``args.target``."""
    from stave.bench.script_ladder import DEFAULT_STEPS, PAIRS, ScriptOptions, run_script_ladder
    from stave.capture.runner import Target

    rest = _script_tokens(args)
    given = [flag for name, flag in NOT_FOR_SCRIPTS if getattr(args, name, None) not in (None, False)]
    if given:
        raise UsageError(f"{', '.join(given)}: not for a script (each window is a run of the script; see docs/bench.md)")
    rungs = tuple(n.strip() for n in args.rungs.split(",") if n.strip()) if args.rungs else None
    pairs = args.pairs if args.pairs is not None else PAIRS
    options = ScriptOptions(
        steps=args.steps if args.steps is not None else DEFAULT_STEPS,
        pairs=pairs,
        max_pairs=max(pairs, 2 * PAIRS),
        seed=args.seed,
        quick=args.quick,
        allow_learning_changes=args.allow_learning_changes,
        rungs=rungs,
    )
    return run_script_ladder(Target(rest[0], tuple(rest[1:])), options, progress=progress)


def run_ladder_command(args: argparse.Namespace) -> int:
    """Climb, print the table and the code, write the files asked for."""
    from rich.console import Console
    from rich.text import Text

    from stave.bench.result import LadderIncomplete

    script = bool(_script_tokens(args))
    if not script and args.allow_learning_changes:
        raise UsageError("--allow-learning-changes applies to a script (stave bench ladder SCRIPT)")
    check_outputs((args.json, "--json"), (args.html, "--html"), (args.png, "--png"))
    err = Console(stderr=True, highlight=False)

    def progress(message: str) -> None:
        if not args.quiet:
            err.print(Text(message, style="dim"))

    try:
        result = script_ladder_from_args(args, progress) if script else ladder_from_args(args, progress)
    except LadderIncomplete as stopped:
        # Write and show what was measured, then fail as the cause says (Ctrl-C, an error).
        _write_and_show(args, stopped.result)
        err.print(Text(f"stave bench ladder stopped early: {stopped.result.incomplete}; the files asked for "
                       "hold the rungs measured so far", style="yellow"))
        raise stopped.cause from None
    _write_and_show(args, result)
    return 0


def _write_and_show(args: argparse.Namespace, result: Any) -> None:
    """Write the files asked for, then the table and the paste-able code (unless --quiet)."""
    from stave.files import atomic_write_bytes, atomic_write_json, atomic_write_text

    if hasattr(result, "script"):
        _write_and_show_script(args, result)
        return
    if args.json:
        from stave.report.bench_json import to_json

        atomic_write_json(args.json, to_json(result))
    if args.html:
        from stave.report.bench_html import ladder_html

        atomic_write_text(args.html, ladder_html(result))
    if args.png:
        from stave.report.bench_html import chart_png

        atomic_write_bytes(args.png, chart_png(result))
    if not args.quiet:
        from stave.report.bench_table import ladder_report

        _show(ladder_report(result), result, "(stave tune prints just this)")


def _show(report: Any, result: Any, code_note: str) -> None:
    """The table and summary, then the final configuration's code."""
    from rich.console import Console

    # Piped output gets a fixed width wide enough for the reasons column (rich assumes 80).
    out = Console(highlight=False, width=None if sys.stdout.isatty() else TABLE_WIDTH)
    out.print(report)
    heading = "final configuration" if result.incomplete is None else "configuration kept so far"
    out.print(f"\n{heading} {code_note}:\n")
    # Plain print: the code must paste exactly, without rich's wrapping or markup.
    print(result.code, end="")


def _write_and_show_script(args: argparse.Namespace, result: Any) -> None:
    """The script ladder's JSON, table and code."""
    from stave.files import atomic_write_json
    from stave.report.bench_script import script_report, to_json

    if args.json:
        atomic_write_json(args.json, to_json(result))
    if not args.quiet:
        _show(script_report(result), result, "as code to write into the script (stave does not edit it)")


def run_data_command(args: argparse.Namespace) -> int:
    """Hand over to ``stave.data.benchmark`` (imported only now, so the ladder works without it)."""
    try:
        from stave.data import benchmark
    except ImportError as exc:
        raise UsageError(f"stave bench data needs stave.data.benchmark, which is not available: {exc}") from exc
    parser = argparse.ArgumentParser(prog="stave bench data", description="The stave.data benchmark.")
    benchmark.add_arguments(parser)
    data_args = parser.parse_args(args.data_args)
    from rich.console import Console

    from stave.report.bench_data import render_data_bench

    render_data_bench(benchmark.run(data_args), Console())
    return 0
