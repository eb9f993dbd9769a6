"""Planted bottleneck: loader workers restarted every short epoch (expect DATA_WORKER_STARTUP).

The dataset keeps its annotations in a JSON index that it loads lazily, on first use in each
worker (the usual way to keep per-process state out of a forked parent). With
``persistent_workers=False`` (the default) every epoch shuts its two workers down and starts two
new ones: each forks the training process and parses the index again before the epoch's first
batch can arrive. Epochs here are four steps long, so that start-up is paid every fourth step.
(With the "spawn" start method, the default on macOS and Windows, each new worker also imports
torch: seconds per epoch.)

``--fixed``: ``persistent_workers=True`` keeps the workers, and their parsed index, across epochs.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import DataLoader, Dataset

SAMPLES = 1024
FEATURES = 512
# Index entries: per-sample metadata as in a COCO-style annotation file (the bulk is never used).
INDEX_ENTRIES = 20_000


class IndexedDataset(Dataset):
    """Features in memory; labels from an annotation index parsed once per process, on first use."""

    def __init__(self, index_path: str) -> None:
        gen = torch.Generator().manual_seed(0)
        self.features = torch.randn(SAMPLES, FEATURES, generator=gen)
        self.index_path = index_path
        self.labels: list[int] | None = None

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int):
        if self.labels is None:
            with open(self.index_path, encoding="utf-8") as handle:
                entries = json.load(handle)["annotations"]
            self.labels = [entry["category_id"] for entry in entries[:SAMPLES]]
        return self.features[index], self.labels[index]


def write_index() -> str:
    root = tempfile.mkdtemp(prefix="stave-planted-startup-")
    atexit.register(shutil.rmtree, root, True)
    path = os.path.join(root, "annotations.json")
    entries = [
        {"id": i, "image_id": i, "category_id": i % 10, "bbox": [i % 97, i % 89, 32 + i % 13, 32 + i % 7],
         "area": 1024.0 + i % 31, "iscrowd": 0, "file_name": f"images/{i:08d}.jpg"}
        for i in range(INDEX_ENTRIES)
    ]
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"annotations": entries}, handle)
    return path


def main() -> None:
    args = planted_args(__doc__.splitlines()[0])
    torch.manual_seed(0)
    dataset = IndexedDataset(write_index())
    loader = DataLoader(dataset, batch_size=256, shuffle=True, num_workers=2, persistent_workers=args.fixed)
    model = nn.Sequential(nn.Linear(FEATURES, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    timer = StepTimer(args.steps, args.warmup)
    while not timer.done:
        for x, y in loader:
            with cpu_autocast():
                loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            timer.step(x.shape[0])
            if timer.done:
                break
    timer.report()


if __name__ == "__main__":
    main()
