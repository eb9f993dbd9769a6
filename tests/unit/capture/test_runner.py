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


def test_os_exit_in_the_main_thread_ends_the_script_not_the_doctor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from stave.capture import runner

    monkeypatch.setattr(runner, "_hard_exit_code", None)  # restored to None: later CLI calls must not leave
    real = os._exit
    script = _script(tmp_path, "import os\nprint('trained')\nos._exit(4)\nprint('never')\n")
    outcome = run_target(Target(script), Stop)
    assert (outcome.exit_code, outcome.stopped_by, outcome.hard_exit) == (4, "error", True)
    assert os._exit is real  # the guard is gone once the script has ended
    assert runner._hard_exit_code == 4


def test_os_exit_in_a_forked_child_still_ends_the_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stave.capture import runner

    monkeypatch.setattr(runner, "_hard_exit_code", None)
    out = tmp_path / "status.txt"
    body = ("import os\npid = os.fork()\nif pid == 0:\n    os._exit(7)\n"
            f"_, status = os.waitpid(pid, 0)\nopen({str(out)!r}, 'w').write(str(os.waitstatus_to_exitcode(status)))\n")
    outcome = run_target(Target(_script(tmp_path, body)), Stop)
    assert outcome.stopped_by == "end" and not outcome.hard_exit
    assert out.read_text() == "7"
