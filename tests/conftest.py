"""Shared test configuration: markers and the automatic skip of CUDA tests on CPU-only machines."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# jsonschema imports this optional "iri" format checker when it is installed, and it compiles a
# grammar at import (5+ s on a loaded 2-core machine). stave's schemas use no "format" keyword, so
# the tests go without it; jsonschema treats the ImportError as "checker not available".
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = REPO_ROOT.parent / "shared" / "fixtures"
TEST_DATA = Path(__file__).resolve().parent / "data"
# The project's benchmark programs live in benchmarks/ at the repository root (not installed);
# their tests import them as ``benchmarks.NAME``.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _cuda_available():
        return
    skip_cuda = pytest.mark.skip(reason="needs a CUDA GPU; this machine has none")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip_cuda)


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def stave_env() -> dict[str, str]:
    """Environment for running `python -m stave` in a subprocess from the source tree."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture
def python_exe() -> str:
    return sys.executable
