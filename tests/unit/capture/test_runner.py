"""The runner runs scripts like `python script.py args` and reports how they ended."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from stave.capture.runner import Target, run_target
from stave.errors import InputError


class Stop(BaseException):
    pass


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "script.py"
    path.write_text(body)
    return str(path)


def test_argv_and_main_name(tmp_path: Path) -> None:
    out = tmp_path / "seen.txt"
    script = _script(tmp_path, f"import sys\nopen({str(out)!r}, 'w').write(repr((sys.argv, __name__)))\n")
    before = sys.argv[:]
    outcome = run_target(Target(script, ("--lr", "0.1")), Stop)
    assert outcome.exit_code == 0 and outcome.stopped_by == "end"
    assert out.read_text() == repr(([script, "--lr", "0.1"], "__main__"))
    assert sys.argv == before


@pytest.mark.parametrize(
    ("body", "code", "stopped_by"),
    [
        ("raise SystemExit(3)", 3, "error"),
        ("import sys; sys.exit(0)", 0, "exit"),
        ("raise ValueError('boom')", 1, "error"),
        ("raise KeyboardInterrupt", 130, "interrupt"),
    ],
)
def test_exit_codes(tmp_path: Path, body: str, code: int, stopped_by: str, capsys: pytest.CaptureFixture[str]) -> None:
    outcome = run_target(Target(_script(tmp_path, body)), Stop)
    assert (outcome.exit_code, outcome.stopped_by) == (code, stopped_by)
    if "ValueError" in body:
        err = capsys.readouterr().err
        assert "ValueError: boom" in err and "runpy" not in err


def test_stop_exception_is_a_clean_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    stopper = types.ModuleType("stave_test_stopper")

    def stop() -> None:
        raise Stop()

    stopper.stop = stop  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "stave_test_stopper", stopper)
    # `except Exception` in the user's code must not swallow the doctor's stop.
    script = _script(tmp_path, "import stave_test_stopper\ntry:\n    stave_test_stopper.stop()\nexcept Exception:\n    pass\n")
    outcome = run_target(Target(script), Stop)
    assert (outcome.exit_code, outcome.stopped_by) == (0, "steps")


def test_missing_script_and_module() -> None:
    with pytest.raises(InputError, match="script not found"):
        Target("/nonexistent/train.py").check()
    with pytest.raises(InputError, match="no module named"):
        Target("no_such_module_xyz", module=True).check()


def test_run_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "mymod.py"
    pkg.write_text("import sys\nassert __name__ == '__main__'\nsys.exit(int(sys.argv[1]))\n")
    monkeypatch.chdir(tmp_path)
    outcome = run_target(Target("mymod", ("4",), module=True), Stop)
    assert outcome.exit_code == 4
