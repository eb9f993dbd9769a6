"""The options of ``stave bench data``, importable without torch (so the CLI can register them cheaply).

``stave.data.benchmark.add_arguments`` is this function; ``stave.data.benchmark.run`` does the work.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the data benchmark's options to ``parser``."""
    parser.add_argument("--images", type=int, default=3000, help="JPEGs to generate (default 3000)")
    parser.add_argument("--classes", type=int, default=100, help="class folders (default 100)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--size", type=int, default=224, help="output side (RandomResizedCrop size)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per pipeline (default 3)")
    parser.add_argument("--max-workers", type=int, default=4, help="largest DataLoader num_workers searched (default 4)")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path.home() / ".cache" / "stave" / "bench-data",
        help="where generated images and packs are cached",
    )
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    parser.add_argument("--quick", action="store_true", help="a tiny run (seconds) to check the harness, not to quote")
    parser.add_argument("--seed", type=int, default=0)
