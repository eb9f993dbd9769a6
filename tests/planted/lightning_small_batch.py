"""Planted bottleneck: a LightningModule trained at batch 4 (expect SMALL_BATCH; needs ``lightning``).

A small classifier written the Lightning way (``training_step``, ``configure_optimizers``, a
``Trainer(max_steps=...)``) with ``batch_size=4`` in its DataLoader. Lightning adds its own
per-step bookkeeping (hooks, logging, the optimizer closure) on top of the per-batch costs, so
with four samples the fixed costs are nearly the whole step.

``--fixed``: ``batch_size=128``.
"""

from __future__ import annotations

import lightning as L
import torch
from _timing import StepTimer, native_bf16, planted_args
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Classifier(L.LightningModule):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


class Timing(L.Callback):
    def __init__(self, timer: StepTimer) -> None:
        self.timer = timer

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.timer.step(batch[0].shape[0])


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=150, batch_size=4, fixed_batch_size=128, hidden=256)
    L.seed_everything(0, verbose=False)
    gen = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(65536, 64, generator=gen), torch.randint(0, 10, (65536,), generator=gen))
    loader = DataLoader(data, batch_size=args.fixed_batch_size if args.fixed else args.batch_size, shuffle=True)
    timer = StepTimer(args.steps, args.warmup)
    trainer = L.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        precision="bf16-mixed" if native_bf16() else "32-true",
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[Timing(timer)])
    trainer.fit(Classifier(args.hidden), loader)
    timer.report()


if __name__ == "__main__":
    main()
