"""Planted bottleneck: a checkpoint written in the training loop every 4 steps (expect STEP_OUTLIERS).

Every ``CHECKPOINT_EVERY`` steps the loop calls ``torch.save`` on the model and optimizer state
(about 130 MB) before training on: that step stalls while the state is serialized and written.
The rest of the step is an otherwise healthy one: a batch of 32 through a few wide layers in
bf16 autocast.

``--fixed``: the state is copied (fast) and written by a background thread (slow), so the next
steps train while the file is written; one write at a time.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading

import torch
from _timing import StepTimer, planted_args
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

CHECKPOINT_EVERY = 4


def save_in_background(state: dict, path: str, previous: threading.Thread | None) -> threading.Thread:
    """Snapshot ``state`` now, write it in a thread; wait for the previous write first."""
    if previous is not None:
        previous.join()
    optim = state["optimizer"]
    snapshot = {
        "model": {k: v.detach().clone() for k, v in state["model"].items()},
        "optimizer": {
            "state": {k: {n: t.clone() if torch.is_tensor(t) else t for n, t in s.items()} for k, s in optim["state"].items()},
            "param_groups": optim["param_groups"],
        },
    }
    thread = threading.Thread(target=torch.save, args=(snapshot, path))
    thread.start()
    return thread


def main() -> None:
    args = planted_args(__doc__.splitlines()[0])
    torch.manual_seed(0)
    out_dir = tempfile.mkdtemp(prefix="stave-planted-ckpt-")
    atexit.register(shutil.rmtree, out_dir, True)
    gen = torch.Generator().manual_seed(0)
    dataset = TensorDataset(torch.randn(1024, 2048, generator=gen), torch.randint(0, 10, (1024,), generator=gen))
    loader = DataLoader(dataset, batch_size=32, shuffle=True)
    model = nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                          nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    timer = StepTimer(args.steps, args.warmup)
    writer: threading.Thread | None = None
    path = os.path.join(out_dir, "checkpoint.pt")
    while not timer.done:
        for x, y in loader:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if timer.taken % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1:
                state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
                if args.fixed:
                    writer = save_in_background(state, path, writer)
                else:
                    torch.save(state, path)
            timer.step(x.shape[0])
            if timer.done:
                break
    if writer is not None:
        writer.join()
    timer.report()


if __name__ == "__main__":
    main()
