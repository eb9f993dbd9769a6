"""`stave doctor --verify` options: validation (one-line errors) and the verification's settings."""

from __future__ import annotations

import pytest

from stave.cli import _split_script_args, build_parser
from stave.cli.doctor_args import misplaced_options, validate_verify
from stave.cli.doctor_verify import RUN_TIMEOUT_FLOOR_S, verify_options
from stave.errors import UsageError


def _parse(argv: list[str]):
    parser = build_parser()
    args = parser.parse_args(_split_script_args(parser, argv))
    validate_verify(args)
    return args


def test_verify_top_implies_verify_and_sets_the_count() -> None:
    args = _parse(["doctor", "--verify-top", "5", "--verify-pairs", "4", "train.py", "--verify"])
    assert args.verify and args.verify_top == 5
    options = verify_options(args, doctor_wall_s=10.0)
    assert options.top == 5 and options.pairs == 4 and options.timeout_s == RUN_TIMEOUT_FLOOR_S
    assert not options.allow_learning_changes


def test_runs_are_bounded_by_the_doctors_steps() -> None:
    options = verify_options(_parse(["doctor", "--verify", "--steps", "12", "--warmup", "2", "t.py"]), 100.0)
    assert options.steps == 12 and options.warmup == 2 and options.timeout_s == 500.0
    assert verify_options(_parse(["doctor", "--verify", "--verify-steps", "9", "--steps", "50", "t.py"]), 1).steps == 9
    assert verify_options(_parse(["doctor", "--verify", "t.py"]), 1).steps == 30


@pytest.mark.parametrize("argv, message", [
    (["doctor", "--verify-top", "0", "t.py"], ">= 1"),
    (["doctor", "--verify-pairs", "2", "t.py"], "only mean something with --verify"),
    (["doctor", "--allow-learning-changes", "t.py"], "only mean something with --verify"),
])
def test_bad_verify_options(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        _parse(argv)


def test_too_few_steps_for_a_median() -> None:
    with pytest.raises(UsageError, match="at least 3 steps past the warm-up"):
        verify_options(_parse(["doctor", "--verify", "--steps", "6", "--warmup", "5", "t.py"]), 1.0)


def test_verify_options_after_the_script_are_named_as_misplaced() -> None:
    assert misplaced_options(["--lr", "1", "--verify"]) == ["--verify"]
