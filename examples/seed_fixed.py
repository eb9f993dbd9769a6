"""Seed 002's training loop with the rungs `stave bench ladder` kept, as a plain PyTorch script.

The same ResNet-18, fake CIFAR data, loss and SGD as ``examples/seed_baseline.py`` (imported from
it, not redefined), with what the ladder kept for ``seed-resnet18`` on the 2-core CPU that
docs/benchmarks.md describes:

* a larger batch (``--batch-size``, 128 by default; the learning rate is scaled with it);
* images sent as uint8 (Resize + PILToTensor in the loader) and normalized on the device;
* bf16 autocast with channels_last weights and batches, where the device computes bf16
  natively (a CPU with AMX/AVX512-BF16, a GPU of compute capability 8.0+); fp32 otherwise;
* ``zero_grad(set_to_none=True)`` (the default since torch 2.0, written out);
* on a GPU: pinned batches copied with ``non_blocking=True``, ``cudnn.benchmark``.

Rungs are machine-specific: run ``stave tune`` on yours and paste what it prints instead.

    python examples/seed_fixed.py [--size 64] [--batch-size 128] [--workers 0]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader
from torchvision import transforms

try:  # run as a script from examples/, or imported as the stave_examples package
    from seed_baseline import CIFAR_MEAN, CIFAR_STD, FakeCIFAR, build_model
except ImportError:  # imported as stave_examples.seed_fixed
    from stave_examples.seed_baseline import CIFAR_MEAN, CIFAR_STD, FakeCIFAR, build_model

BASE_LR = 0.001
BASE_BATCH = 32


def native_bf16(device: torch.device) -> bool:
    """bf16 pays only where the hardware computes it natively."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            flags = next((line for line in handle if line.startswith("flags")), "")
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64, help="image side after Resize (seed original: 224)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--samples", type=int, default=5000, help="size of the fake dataset")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-every", type=int, default=10)
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    on_gpu = device.type == "cuda"
    bf16 = native_bf16(device)
    if on_gpu:
        torch.backends.cudnn.benchmark = True  # fixed shapes: time the conv algorithms once

    # uint8 on the wire: Resize stays in the loader, ToTensor + Normalize move to the device.
    transform = transforms.Compose([transforms.Resize(args.size), transforms.PILToTensor()])
    dataset = FakeCIFAR(args.samples, transform=transform, seed=args.seed)
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
        pin_memory=on_gpu,
        drop_last=True,
    )
    memory_format = torch.channels_last if bf16 else torch.contiguous_format
    model = build_model().to(device, memory_format=memory_format)
    # The seed's SGD, with the learning rate scaled linearly with the batch.
    optimizer = torch.optim.SGD(model.parameters(), lr=BASE_LR * args.batch_size / BASE_BATCH, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    mean = torch.tensor(CIFAR_MEAN, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(CIFAR_STD, device=device).view(1, 3, 1, 1) * 255

    model.train()
    start = time.perf_counter()
    seen = 0
    for epoch in range(args.epochs):
        for step, (images, labels) in enumerate(loader):
            # non_blocking: from pinned memory the copy overlaps the previous step's compute (GPU).
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            images = ((images.float() - mean) / std).contiguous(memory_format=memory_format)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                loss = criterion(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            seen += images.shape[0]
            if step % args.log_every == 0:
                # loss.item() waits for the device: only every log_every steps.
                rate = seen / (time.perf_counter() - start)
                print(f"epoch {epoch} step {step} loss {loss.item():.4f} {rate:.1f} samples/s")


if __name__ == "__main__":
    main()
