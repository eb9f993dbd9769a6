"""Planted bottleneck: torchvision-reference-style short epochs, each followed by evaluation (expect EVAL_OVERHEAD).

Written like torchvision's classification reference: ``train_one_epoch`` then ``evaluate`` with
``torch.inference_mode()`` after every epoch. The training subset is small (8 batches per epoch)
and the validation set as large as the training set, so evaluation takes about as long as training.

``--fixed``: ``--eval-every-epochs`` large (evaluation at the end of training only, beyond this run).
"""

from __future__ import annotations

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def train_one_epoch(model, criterion, optimizer, loader, timer: StepTimer) -> None:
    model.train()
    for image, target in loader:
        with cpu_autocast():
            output = model(image)
            loss = criterion(output, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        timer.step(image.shape[0])
        if timer.done:
            return


def evaluate(model, criterion, loader) -> float:
    model.eval()
    total = 0.0
    with torch.inference_mode():
        for image, target in loader:
            with cpu_autocast():
                total += float(criterion(model(image), target))
    return total / len(loader)


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=40, batch_size=32, epoch_batches=8, val_batches=8,
                        eval_every_epochs=1, width=32)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    n_train, n_val = args.batch_size * args.epoch_batches, args.batch_size * args.val_batches
    train = TensorDataset(torch.randn(n_train, 3, 48, 48, generator=gen), torch.randint(0, 10, (n_train,), generator=gen))
    val = TensorDataset(torch.randn(n_val, 3, 48, 48, generator=gen), torch.randint(0, 10, (n_val,), generator=gen))
    train_loader = DataLoader(train, batch_size=args.batch_size, shuffle=True)
    val_loader = DataLoader(val, batch_size=args.batch_size)
    w = args.width
    model = nn.Sequential(nn.Conv2d(3, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(w, 2 * w, 3, padding=1), nn.BatchNorm2d(2 * w), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * w, 10))
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    every = 10_000 if args.fixed else args.eval_every_epochs
    timer = StepTimer(args.steps, args.warmup)
    epoch = 0
    while not timer.done:
        train_one_epoch(model, criterion, optimizer, train_loader, timer)
        epoch += 1
        if epoch % every == 0:
            evaluate(model, criterion, val_loader)
    timer.report()


if __name__ == "__main__":
    main()
