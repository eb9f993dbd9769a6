"""``jpeg-resnet``: ResNet-18 on the ImageNet-like JPEG set of the data issue.

The images come from ``stave.data.synth.make_image_folder`` (crops of real photographs, about
500x375, quality 90, class folders), generated once into a cache directory and packed there with
``stave.data.pack`` for the loader rung. The baseline is the torchvision pipeline users write:
``ImageFolder`` + PIL + RandomResizedCrop + flip + ToTensor + Normalize, batch 32, no workers,
SGD with momentum. ``stave.data.ImageLoader`` over the packed set is a rung of its own.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
import torchvision
from torch import nn
from torchvision import transforms

from stave.bench.spec import CustomLoader, JobSpec, LoaderRequest
from stave.errors import UsageError

log = logging.getLogger(__name__)

NAME = "jpeg-resnet"
DEFAULT_SIZE = 224
IMAGES = 2048
CLASSES = 16
# --quick: a small set at 64 px, so generation, packing and the climb take seconds.
QUICK_SIZE = 64
QUICK_IMAGES = 256
QUICK_CLASSES = 4
BATCH_SIZE = 32
# ImageNet's usual SGD, with the learning rate scaled linearly from 0.1 at batch 256.
LR = 0.1 * BATCH_SIZE / 256
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# Evaluation resize: the standard 256 -> 224 ratio.
EVAL_RESIZE_RATIO = 0.875


def cache_dir() -> Path:
    """Where the generated JPEGs and their pack live (``STAVE_BENCH_CACHE`` overrides)."""
    return Path(os.environ.get("STAVE_BENCH_CACHE", Path.home() / ".cache" / "stave" / "bench-jpeg"))


def prepare(images: int, classes: int, seed: int = 0) -> tuple[Path, Path]:
    """Generate (once) the JPEG folder and its pack; returns (image folder, packed directory)."""
    try:
        from stave.data import pack
        from stave.data.synth import make_image_folder
        from stave.data.writer import packed_with
    except ImportError as exc:
        raise UsageError(f"the jpeg-resnet workload needs stave.data (generator and packer): {exc}") from exc
    root = cache_dir() / f"synth-{images}-{classes}-{seed}"
    folder, packed = root / "images", root / "packed"
    done = root / ".complete"
    if not done.exists():
        log.info("generating %d JPEGs in %s (once)", images, folder)
        make_image_folder(folder, images, classes, seed=seed, overwrite=True)
        done.write_text("ok\n", encoding="utf-8")
    if not packed_with(packed, {"restart_markers": True}):  # a pack by an older stave is redone
        pack(folder, packed, overwrite=True)
    return folder, packed


def _transform(size: int, train: bool, uint8: bool) -> transforms.Compose:
    steps: list[object] = (
        [transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip()]
        if train
        else [transforms.Resize(int(round(size / EVAL_RESIZE_RATIO))), transforms.CenterCrop(size)]
    )
    steps += (
        [transforms.PILToTensor()]
        if uint8
        else [transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    )
    return transforms.Compose(steps)


def _image_loader(packed: Path, size: int) -> CustomLoader:
    def build(request: LoaderRequest) -> object:
        from stave.data import ImageLoader

        return ImageLoader(
            packed,
            request.batch_size,
            train=request.train,
            size=size,
            workers="auto",
            device=request.device,
            mean=IMAGENET_MEAN,
            std=IMAGENET_STD,
            channels_last=request.channels_last,
            seed=request.seed,
            drop_last=True,
        )

    code = (
        f'loader = stave.data.ImageLoader("{packed}", batch_size=BATCH, train=True, size={size},\n'
        '                                 workers="auto", device=device, channels_last=True)\n'
        "# packed once with: stave pack IMAGE_FOLDER PACKED_DIR"
    )
    return CustomLoader("stave.data.ImageLoader", build, "stave.data.ImageLoader (packed JPEGs)", code)


def build(size: int | None = None, quick: bool = False) -> JobSpec:
    """The workload at ``size`` px (default 224)."""
    side = size or (QUICK_SIZE if quick else DEFAULT_SIZE)
    images, classes = (QUICK_IMAGES, QUICK_CLASSES) if quick else (IMAGES, CLASSES)
    folder, packed = prepare(images, classes)

    def folder_dataset(train: bool, uint8: bool) -> torchvision.datasets.ImageFolder:
        return torchvision.datasets.ImageFolder(str(folder), transform=_transform(side, train, uint8))

    def model() -> nn.Module:
        return torchvision.models.resnet18(num_classes=classes)

    def optimizer(net: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(net.parameters(), lr=LR, momentum=0.9, weight_decay=1e-4)

    return JobSpec(
        name=NAME,
        model=model,
        dataset=folder_dataset(True, False),
        loss=nn.CrossEntropyLoss(),
        optimizer=optimizer,
        batch_size=BATCH_SIZE,
        num_workers=0,
        uint8_dataset=folder_dataset(True, True),
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        check_dataset=folder_dataset(False, False),
        check_uint8_dataset=folder_dataset(False, True),
        loaders=(_image_loader(packed, side),),
        description=(
            f"ResNet-18 on {images} ImageNet-like JPEGs ({classes} classes), "
            f"torchvision pipeline at {side} px, batch {BATCH_SIZE}"
        ),
    )
