"""An ImageNet-like JPEG folder made from real photographs, for benchmarks and tests.

Random noise decodes atypically (no smooth regions, huge files), so every image here is a crop of a
real photograph that ships inside scikit-image (``skimage.data``: astronaut, coffee, chelsea,
rocket, the Hubble deep field, a retina, a stereo pair of a motorcycle, textures...), rescaled to an
ImageNet-like size (about 500x375, landscape and portrait), lightly colour-jittered, and encoded
by Pillow (libjpeg-turbo) as baseline 4:2:0 JPEG at quality 90, in class sub-folders. A small share
is grayscale, as in ImageNet. The output depends only on the arguments (seeded).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

from stave.errors import InputError, OutputError

log = logging.getLogger(__name__)

# ImageNet's long side is usually 500 px and its most common aspect is 4:3.
DEFAULT_LONG_SIDE_PX = 500
# (width, height) ratios, weighted roughly like ImageNet's mix of landscape, portrait and square.
ASPECTS: tuple[tuple[float, float], ...] = ((4 / 3, 0.55), (3 / 4, 0.15), (3 / 2, 0.15), (1.0, 0.10), (16 / 9, 0.05))
# ImageNet holds about 2% grayscale JPEGs; the loader must turn them into 3 channels.
GRAY_SHARE = 0.02
# A crop smaller than this share of the photo is upscaled so much it loses all texture.
MIN_CROP_AREA_SHARE = 0.5
# Sensor-like grain (std in levels): resampled photographs are smoother than camera JPEGs.
GRAIN_STD = 2.0

# Colour photographs from skimage.data (names of its loader functions), and grayscale ones.
_COLOR_SOURCES = (
    "astronaut",
    "coffee",
    "chelsea",
    "rocket",
    "hubble_deep_field",
    "immunohistochemistry",
    "retina",
    "motorcycle_left",
    "motorcycle_right",
)
_GRAY_SOURCES = ("camera", "moon", "coins", "clock", "grass", "gravel", "brick")


@dataclass(frozen=True)
class SynthSummary:
    """What :func:`make_image_folder` wrote."""

    root: Path
    num_images: int
    num_classes: int
    total_bytes: int


@functools.lru_cache(maxsize=1)
def _load_sources() -> tuple[list[np.ndarray], list[np.ndarray]]:
    try:
        import skimage.data as skdata
    except ImportError as exc:
        raise InputError(
            "the image generator needs scikit-image's sample photographs: pip install 'stave[bench]'"
        ) from exc

    def get(name: str) -> np.ndarray:
        if name.startswith("motorcycle_"):
            left, right, _disp = skdata.stereo_motorcycle()
            return left if name.endswith("left") else right
        loader: Callable[[], np.ndarray] = getattr(skdata, name)
        return loader()

    color = [np.ascontiguousarray(get(n)[..., :3]) for n in _COLOR_SOURCES]
    gray = [np.ascontiguousarray(get(n)) for n in _GRAY_SOURCES]
    return color, gray


def _pick_aspect(rng: np.random.Generator) -> float:
    ratios = np.array([a for a, _ in ASPECTS])
    weights = np.array([w for _, w in ASPECTS])
    return float(rng.choice(ratios, p=weights / weights.sum()))


def _render(source: np.ndarray, rng: np.random.Generator, long_side: int) -> Image.Image:
    """A random crop of ``source`` with a random aspect, scaled so its long side is ``long_side``."""
    src_h, src_w = source.shape[:2]
    aspect = _pick_aspect(rng)
    out_w, out_h = (long_side, round(long_side / aspect)) if aspect >= 1 else (round(long_side * aspect), long_side)
    area_share = rng.uniform(MIN_CROP_AREA_SHARE, 1.0)
    crop_w = min(src_w, max(16, round(np.sqrt(area_share * src_w * src_h * aspect))))
    crop_h = min(src_h, max(16, round(crop_w / aspect)))
    crop_w = min(src_w, max(16, round(crop_h * aspect)))
    x0 = int(rng.integers(0, src_w - crop_w + 1))
    y0 = int(rng.integers(0, src_h - crop_h + 1))
    crop = source[y0 : y0 + crop_h, x0 : x0 + crop_w]
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    image = Image.fromarray(np.ascontiguousarray(crop))
    image = image.resize((out_w, out_h), Image.Resampling.LANCZOS)
    if image.mode == "RGB":
        # Mild per-channel gain: the same few photographs should not give identical colour statistics.
        gains = rng.uniform(0.85, 1.15, size=3)
        arr = np.asarray(image, dtype=np.float32) * gains
        arr += rng.standard_normal(size=arr.shape, dtype=np.float32) * np.float32(GRAIN_STD)
        image = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))
    return image


def make_image_folder(
    dst: str | Path,
    num_images: int,
    num_classes: int,
    seed: int = 0,
    *,
    quality: int = 90,
    long_side: int = DEFAULT_LONG_SIDE_PX,
    gray_share: float = GRAY_SHARE,
    overwrite: bool = False,
) -> Path:
    """Write ``num_images`` JPEGs into ``dst/<class>/<n>.jpg`` (torchvision ImageFolder layout).

    Images are crops of real photographs (see the module docstring), about 500x375 by default,
    baseline JPEG at ``quality`` with 4:2:0 chroma subsampling, spread evenly over
    ``num_classes`` folders named ``class_000``... Returns ``dst``. An existing non-empty ``dst`` is
    an error unless ``overwrite`` (then only ``*.jpg`` files inside class folders are replaced).
    """
    if num_images < 1 or num_classes < 1:
        raise InputError(f"need num_images >= 1 and num_classes >= 1, got {num_images} and {num_classes}")
    if not 1 <= quality <= 100:
        raise InputError(f"quality must be in 1..100, got {quality}")
    if long_side < 16:
        raise InputError(f"long_side must be at least 16 px, got {long_side}")
    root = Path(dst)
    if root.exists() and any(root.iterdir()) and not overwrite:
        raise OutputError(f"{root} is not empty; choose a new folder or pass overwrite=True")
    color, gray = _load_sources()
    rng = np.random.default_rng(seed)
    total = 0
    for index in range(num_images):
        label = index % num_classes
        folder = root / f"class_{label:03d}"
        if index < num_classes:
            folder.mkdir(parents=True, exist_ok=True)
        use_gray = rng.random() < gray_share
        pool = gray if use_gray else color
        source = pool[int(rng.integers(0, len(pool)))]
        image = _render(source, rng, long_side)
        path = folder / f"{index:07d}.jpg"
        image.save(path, format="JPEG", quality=quality, subsampling="4:2:0")
        total += path.stat().st_size
    log.info("wrote %d JPEGs (%.1f MB) into %s", num_images, total / 1e6, root)
    return root
