"""The project's own benchmark programs (``make bench`` runs :mod:`benchmarks.run_all`).

Not part of the installed package: run them from the repository root, ``python -m benchmarks.NAME``.
They measure stave; ``stave bench ladder`` and ``stave bench data`` are the product's benchmarks
and stay in ``src/stave``.
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
