"""Helpers for running `python -m stave doctor` on small generated scripts."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TRAIN_SCRIPT = textwrap.dedent(
    """
    import argparse, os, sys
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--losses", default=None)
    parser.add_argument("--pids", default=None)
    parser.add_argument("--progress", default=None)
    parser.add_argument("--raise-at", type=int, default=-1)
    parser.add_argument("--exit-code", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.randn(2048, 3, 16, 16)
    y = torch.randint(0, 10, (2048,))

    def init(worker_id):
        if args.pids:
            with open(os.path.join(args.pids, f"w{worker_id}-{os.getpid()}"), "w") as f:
                f.write("")

    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, num_workers=args.workers,
                        worker_init_fn=init)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    step = 0
    while step < args.steps:
        for xb, yb in loader:
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step += 1
            if args.progress:
                with open(args.progress, "w") as f:
                    f.write(str(step))
            if step == args.raise_at:
                raise RuntimeError("planted failure at step %d" % step)
            if step >= args.steps:
                break
    if args.losses:
        with open(args.losses, "w") as f:
            f.write("\\n".join(repr(v) for v in losses))
    sys.exit(args.exit_code)
    """
)


@pytest.fixture
def train_script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(TRAIN_SCRIPT)
    return path


def _run_stave(args: list[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stave", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def run_stave():
    """Run `python -m stave ARGS` in a subprocess; returns the CompletedProcess."""
    return _run_stave
