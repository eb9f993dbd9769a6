"""The ladder's built-in workloads, and ``--job MODULE:FUNCTION`` for the user's own.

Each built-in is a module with ``NAME`` and ``build(size=None, quick=False) -> JobSpec``; they are
imported only when chosen, so a missing optional part (stave.data for ``jpeg-resnet``) affects
only its own workload.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Callable

from stave.errors import UsageError

if TYPE_CHECKING:
    from stave.bench.spec import JobSpec

# stave.bench.spec (and torch) is imported only when a job is built: the CLI's parser reads the
# names below on every `stave` command.

WORKLOADS: dict[str, str] = {
    "seed-resnet18": "stave.bench.workloads.seed_resnet18",
    "jpeg-resnet": "stave.bench.workloads.jpeg_resnet",
    "gpt-char": "stave.bench.workloads.gpt_char",
}


def build_workload(name: str, size: int | None = None, quick: bool = False) -> JobSpec:
    """The built-in workload ``name`` (``size``: image side or sequence length; None: its default)."""
    if name not in WORKLOADS:
        raise UsageError(
            f"unknown workload {name!r}; choose one of {', '.join(WORKLOADS)} or pass --job MODULE:FUNCTION"
        )
    module = importlib.import_module(WORKLOADS[name])
    return module.build(size=size, quick=quick)


def load_job(target: str) -> JobSpec:
    """Import ``MODULE:FUNCTION`` (from the current directory too) and call it for the job spec."""
    module_name, sep, func_name = target.partition(":")
    if not sep or not module_name or not func_name:
        raise UsageError(f"--job needs MODULE:FUNCTION (e.g. train:bench_spec), got {target!r}")
    if os.getcwd() not in sys.path:
        # Users run `stave bench ladder --job train:spec` next to their train.py.
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"cannot import {module_name!r} for --job: {exc}") from exc
    func: Callable[[], object] | None = getattr(module, func_name, None)
    if not callable(func):
        raise UsageError(f"{module_name} has no function {func_name!r} for --job")
    from stave.bench.spec import spec_from

    return spec_from(func(), f"{module_name}:{func_name}")
