"""Runs the user's script or module in this process, the way ``python script.py args`` would.

``sys.argv``, ``sys.path[0]`` and ``__main__`` are set as Python sets them, so argparse, relative
imports next to the script and ``if __name__ == "__main__"`` behave as usual, and multiprocessing
with the spawn start method can re-import the script in its children.
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path

from stave.errors import InputError

EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class Target:
    """What to run: a script path or a module name, and its arguments."""

    name: str
    args: tuple[str, ...] = ()
    module: bool = False

    def check(self) -> None:
        """Raise InputError (exit 2) now if the script or module cannot be found."""
        if self.module:
            import importlib.util

            try:
                spec = importlib.util.find_spec(self.name)
            except (ImportError, ValueError) as exc:
                raise InputError(f"cannot import module {self.name!r}: {exc}") from exc
            if spec is None:
                raise InputError(f"no module named {self.name!r} (check the name and that its package is installed)")
            return
        path = Path(self.name)
        if not path.exists():
            raise InputError(f"script not found: {self.name} (give the path of a Python training script)")
        if path.is_dir() and not (path / "__main__.py").exists():
            raise InputError(f"{self.name} is a directory without __main__.py; give a script")


@dataclass
class Outcome:
    """How the script ended: its exit code and why it stopped ("end", "steps", "exit", "error", "interrupt").

    ``hard_exit``: the script ended with ``os._exit``, asking to skip the interpreter's teardown
    (scripts do it to dodge a hanging or aborting process-group shutdown); the caller finishes its
    report and then leaves the same way (:func:`leave_if_hard_exit`).
    """

    exit_code: int
    stopped_by: str
    error: str | None = None
    hard_exit: bool = False


class _HardExit(BaseException):
    """Raised in place of ``os._exit`` in the doctor's own main thread, so the report is still written."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


_real_os_exit = os._exit
_hard_exit_code: int | None = None


def _guard_os_exit() -> None:
    """Make the script's ``os._exit`` in this process's main thread unwind to the runner.

    ``os._exit`` ends the process at once, and the doctor runs in the script's process: the steps
    measured so far would be lost. Forked children (DataLoader workers, multiprocessing) and other
    threads keep the real call: a child must never run the doctor's code, and only the main thread
    can unwind to the runner.
    """
    pid = os.getpid()
    main = threading.main_thread()

    def guarded(code: int) -> None:
        if os.getpid() == pid and threading.current_thread() is main:
            raise _HardExit(int(code))
        _real_os_exit(code)

    os._exit = guarded


def leave_if_hard_exit(code: int) -> None:
    """End the process now with ``code``, skipping the teardown, where the script ended with ``os._exit``."""
    if _hard_exit_code is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        _real_os_exit(code)


def _user_traceback(exc: BaseException) -> str:
    """The traceback from the user's code down, without the runner's and runpy's frames."""
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not (filename.endswith(("runner.py", "runpy.py")) or "<frozen runpy>" in filename):
            break
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def run_target(target: Target, stop_exc: type[BaseException]) -> Outcome:
    """Run ``target`` to the end, or until ``stop_exc`` is raised by the doctor's hooks."""
    saved_argv = sys.argv[:]
    saved_path = sys.path[:]
    if target.module:
        sys.argv = [target.name, *target.args]
        sys.path.insert(0, os.getcwd())
    else:
        script = os.path.abspath(target.name)
        sys.argv = [target.name, *target.args]
        sys.path.insert(0, os.path.dirname(script) if os.path.isfile(script) else script)
    global _hard_exit_code
    _hard_exit_code = None
    _guard_os_exit()
    try:
        if target.module:
            runpy.run_module(target.name, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target.name, run_name="__main__")
    except stop_exc:
        return Outcome(0, "steps")
    except _HardExit as exc:
        _hard_exit_code = exc.code
        return Outcome(exc.code, "exit" if exc.code == 0 else "error", None if exc.code == 0 else f"exit code {exc.code}",
                       hard_exit=True)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return Outcome(0, "exit")
        if isinstance(code, int):
            return Outcome(code, "exit" if code == 0 else "error", None if code == 0 else f"exit code {code}")
        # sys.exit("message") prints the message and exits with 1, as Python does.
        sys.stderr.write(f"{code}\n")
        return Outcome(1, "error", str(code))
    except KeyboardInterrupt:
        return Outcome(EXIT_INTERRUPTED, "interrupt", "interrupted (Ctrl-C)")
    except BaseException as exc:  # the user's own exception: show their traceback, keep the report
        sys.stderr.write(_user_traceback(exc))
        sys.stderr.flush()
        return Outcome(1, "error", f"{type(exc).__name__}: {exc}")
    finally:
        os._exit = _real_os_exit
        sys.argv = saved_argv
        sys.path[:] = saved_path
    return Outcome(0, "end")
