"""The ``stave`` command line: one module per subcommand, each thin (parse, call, render).

Exit codes: 0 ok; 1 a finding at or above ``--fail-on``; 2 bad usage or input (one line on
stderr says what and what to do); 3 an internal error in stave; for ``stave doctor``, a script
that exits non-zero passes its own code through. Data goes to stdout, progress and logs to stderr.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import sys
from typing import Sequence

from stave import __version__
from stave.capture.runner import leave_if_hard_exit
from stave.errors import StaveError

# Subcommand modules under stave.cli; each defines ``register(subparsers)`` which sets ``func``.
SUBCOMMANDS: tuple[str, ...] = ("doctor", "trace", "pack", "bench", "tune", "demo")

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130

log = logging.getLogger("stave")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every available subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="stave",
        description="Find the short stave in a PyTorch training job and fix it.",
    )
    parser.add_argument("--version", action="version", version=f"stave {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in SUBCOMMANDS:
        module_name = f"{__name__}.{name}"
        if importlib.util.find_spec(module_name) is None:
            continue
        importlib.import_module(module_name).register(sub)
    return parser


def configure_logging(verbosity: int) -> None:
    """Library code logs under ``stave.*``; the CLI shows warnings (more with -v) on stderr."""
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("stave: %(levelname)s: %(message)s"))
    root = logging.getLogger("stave")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def _split_script_args(parser: argparse.ArgumentParser, tokens: list[str]) -> list[str]:
    """Keep a launched script's own options away from argparse (``stave doctor [OPTS] SCRIPT ARGS``).

    Subcommands that launch scripts define ``split_target(subparser, tokens)``; the script's part is
    passed through after ``--`` so argparse collects it verbatim into ``target``.
    """
    sub_action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for i, tok in enumerate(tokens):
        if tok in sub_action.choices:
            subparser = sub_action.choices[tok]
            splitter = subparser.get_default("split_target")
            if splitter is None:
                return tokens
            own, script = splitter(subparser, tokens[i + 1:])
            return tokens[: i + 1] + own + (["--", *script] if script else [])
        if not tok.startswith("-"):
            return tokens
    return tokens


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stave`` console script; returns the exit code."""
    parser = build_parser()
    tokens = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(_split_script_args(parser, tokens))
    configure_logging(args.verbose)
    try:
        code = int(args.func(args) or 0)
        # The report is written: a script that ended with os._exit skipped the teardown on purpose.
        leave_if_hard_exit(code)
        return code
    except StaveError as exc:
        print(f"stave: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("stave: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # stdout closed early (e.g. `stave ... | head`): not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:  # the last line of defence: one line, not a bare traceback
        log.debug("internal error", exc_info=True)
        print(
            f"stave: internal error: {type(exc).__name__}: {exc} "
            "(this is a bug in stave; rerun with -vv for the traceback and report it)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
