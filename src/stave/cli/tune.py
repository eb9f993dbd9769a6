"""``stave tune``: print only the final configuration of the optimization ladder, as code to paste.

``stave tune [--workload NAME | --job MODULE:FUNCTION] [--quick] ...`` climbs the ladder (progress
on stderr) and prints the code on stdout; ``stave tune --from RESULT.json`` prints the code a
previous ``stave bench ladder --json`` run kept, without timing anything.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from stave.cli.bench import add_ladder_arguments, ladder_from_args
from stave.errors import FormatError, InputError

# A ladder result is a few hundred KB at most; anything far larger is not one.
MAX_RESULT_BYTES = 64 * 2**20


def register(sub: Any) -> None:
    """Add the ``tune`` subcommand."""
    p = sub.add_parser(
        "tune",
        help="print the optimized training configuration for this machine as code",
        description="Climb the optimization ladder and print only the final configuration as paste-able code.",
    )
    add_ladder_arguments(p)
    p.add_argument(
        "--from",
        dest="from_json",
        metavar="PATH",
        help="print the code kept in a `stave bench ladder --json` result instead of measuring",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run)


def code_from_result(path: str) -> str:
    """The ``code`` of a ``stave.bench/1`` JSON file (checked: it is a file from someone else)."""
    target = Path(path)
    try:
        size = target.stat().st_size
        if size > MAX_RESULT_BYTES:
            raise FormatError(f"{target}: {size} bytes is too large for a stave.bench/1 result")
        data = json.loads(target.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError(f"{target}: no such file; run `stave bench ladder --json {target}` first") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{target}: cannot read it: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise FormatError(f"{target}: not JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(data, dict) or data.get("schema") != "stave.bench/1":
        raise FormatError(f"{target}: not a stave.bench/1 result (write one with `stave bench ladder --json`)")
    code = data.get("code")
    if not isinstance(code, str) or not code.strip():
        raise FormatError(f"{target}: the result has no 'code' string")
    return code


def run(args: argparse.Namespace) -> int:
    """Print the code; exit 0."""
    if args.from_json:
        code = code_from_result(args.from_json)
    else:
        from rich.console import Console
        from rich.text import Text

        err = Console(stderr=True, highlight=False)

        def progress(message: str) -> None:
            if not args.quiet:
                err.print(Text(message, style="dim"))

        from stave.bench.result import LadderIncomplete

        try:
            code = ladder_from_args(args, progress).code
        except LadderIncomplete as stopped:
            # A half-climbed ladder's code is not "the" configuration: fail as the cause says.
            raise stopped.cause from None
    print(code, end="" if code.endswith("\n") else "\n")
    return 0
