"""Fixtures for the stave.data tests: image folders and packed datasets built from the shipped photos."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

IMAGES = Path(__file__).resolve().parents[2] / "data" / "images"


def photo(name: str = "chelsea_240x160.jpg") -> Image.Image:
    """A shipped fixture photo as an RGB PIL image."""
    return Image.open(IMAGES / name).convert("RGB")


def jpeg_bytes(image: Image.Image, quality: int = 90, **kw) -> bytes:
    """Encode ``image`` as JPEG with Pillow."""
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=quality, **kw)
    return buffer.getvalue()


def big_photo_jpeg(width: int = 640, height: int = 427) -> bytes:
    """A larger JPEG (upscaled real photo) for crop and reduced-scale tests."""
    return jpeg_bytes(photo().resize((width, height), Image.Resampling.BICUBIC))


class IndexedImages:
    """A map-style dataset whose label is the item index and whose pixels encode it too."""

    def __init__(self, count: int, seed: int = 0) -> None:
        base = np.asarray(photo())
        rng = np.random.default_rng(seed)
        self.items = []
        for _ in range(count):
            w, h = int(rng.integers(40, 90)), int(rng.integers(40, 90))
            x, y = int(rng.integers(0, base.shape[1] - w)), int(rng.integers(0, base.shape[0] - h))
            self.items.append(np.ascontiguousarray(base[y : y + h, x : x + w]))

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int):
        return self.items[index], index


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ImageFolder tree: 2 classes, shipped fixtures plus upscaled baseline JPEGs."""
    root = tmp_path_factory.mktemp("folder")
    (root / "cat").mkdir()
    (root / "dog").mkdir()
    for name in ("chelsea_240x160.jpg", "coffee_progressive_180x120.jpg", "camera_gray_128x128.jpg"):
        shutil.copy(IMAGES / name, root / "cat" / name)
    for name in ("rocket_restart_160x107.jpg", "astronaut_444_128x128.jpg", "coffee_96x64.png", "chelsea_cmyk_96x64.jpg"):
        shutil.copy(IMAGES / name, root / "dog" / name)
    for i, size in enumerate([(320, 240), (300, 200), (200, 300)]):
        (root / "dog" / f"big_{i}.jpg").write_bytes(big_photo_jpeg(*size))
    return root


@pytest.fixture(scope="session")
def indexed_pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A packed dataset of 53 small JPEGs whose label is their index, in 3+ shards."""
    from stave.data import pack

    root = tmp_path_factory.mktemp("indexed") / "packed"
    pack(IndexedImages(53), root, shard_bytes=1 << 16, workers=2)
    return root
