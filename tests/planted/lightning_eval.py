"""Planted bottleneck: Lightning validating every 4 training batches (expect EVAL_OVERHEAD; needs ``lightning``).

A LightningModule with a ``validation_step`` and ``Trainer(val_check_interval=4)``: the whole
validation loader (larger than the training batches in between) runs every fourth step.

``--fixed``: ``val_check_interval`` beyond the run's steps (``limit_val_batches=0`` in effect), the
same training.
"""

from __future__ import annotations

import lightning as L
import torch
from _timing import StepTimer, native_bf16, planted_args
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(L.LightningModule):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(128, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)


class Timing(L.Callback):
    def __init__(self, timer: StepTimer) -> None:
        self.timer = timer

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.timer.step(batch[0].shape[0])


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=40, batch_size=64, val_size=4096, val_check_interval=4,
                        hidden=512)
    L.seed_everything(0, verbose=False)
    gen = torch.Generator().manual_seed(0)
    train = TensorDataset(torch.randn(8192, 128, generator=gen), torch.randint(0, 10, (8192,), generator=gen))
    val = TensorDataset(torch.randn(args.val_size, 128, generator=gen), torch.randint(0, 10, (args.val_size,), generator=gen))
    timer = StepTimer(args.steps, args.warmup)
    interval = 100_000 if args.fixed else args.val_check_interval
    trainer = L.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        precision="bf16-mixed" if native_bf16() else "32-true",
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        val_check_interval=min(interval, len(train) // args.batch_size), check_val_every_n_epoch=None
                        if not args.fixed else 1000, callbacks=[Timing(timer)])
    trainer.fit(Net(args.hidden), DataLoader(train, batch_size=args.batch_size, shuffle=True),
                DataLoader(val, batch_size=256))
    timer.report()


if __name__ == "__main__":
    main()
