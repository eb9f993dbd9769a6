"""`stave doctor [OPTS] SCRIPT ARGS`: the script's options are the script's, as with python/torchrun."""

from __future__ import annotations

import pytest

from stave.cli import _split_script_args, build_parser
from stave.cli.doctor_args import misplaced_options, target_from


def _parse(argv: list[str]):
    parser = build_parser()
    return parser.parse_args(_split_script_args(parser, argv))


def test_script_options_go_to_the_script() -> None:
    args = _parse(["doctor", "--steps", "5", "--json", "r.json", "train.py", "--steps", "100", "--quiet"])
    assert args.steps == 5 and args.json == "r.json" and not args.quiet
    target = target_from(args)
    assert target.name == "train.py" and target.args == ("--steps", "100", "--quiet") and not target.module


def test_module_mode_and_equals_form() -> None:
    args = _parse(["doctor", "--steps=3", "--quiet", "-m", "pkg.train", "--lr", "0.1"])
    assert args.steps == 3 and args.quiet
    target = target_from(args)
    assert target.module and target.name == "pkg.train" and target.args == ("--lr", "0.1")


def test_missing_script_is_a_usage_error() -> None:
    from stave.errors import UsageError

    with pytest.raises(UsageError):
        target_from(_parse(["doctor", "--steps", "3"]))


def test_doctor_options_after_the_script_are_named() -> None:
    # They reach the script (whose argparse then exits 2); the doctor names them in its hint.
    target = target_from(_parse(["doctor", "train.py", "--lr", "0.1", "--json=r.json", "--html", "r.html"]))
    assert target.args == ("--lr", "0.1", "--json=r.json", "--html", "r.html")
    assert misplaced_options(target.args) == ["--json", "--html"]
    assert misplaced_options(("--lr", "0.1", "--epochs", "3")) == []
