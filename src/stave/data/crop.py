"""Crop boxes chosen from image sizes alone, before any pixel is decoded.

:func:`random_resized_crop_boxes` is torchvision's ``RandomResizedCrop`` sampling (10 tries at a
random area share and log-uniform aspect ratio, then a clamped centre crop), vectorized over a
batch and driven by a caller-owned ``numpy`` generator, so a batch's augmentation depends only on
(seed, epoch, batch) and not on which thread decodes which sample. :func:`center_crop_boxes` is
the evaluation transform ``Resize(resize) + CenterCrop(size)`` expressed as one box on the
original image, so the decoder can crop first and resize once.
"""

from __future__ import annotations

import math

import numpy as np

# torchvision's RandomResizedCrop defaults.
DEFAULT_SCALE = (0.08, 1.0)
DEFAULT_RATIO = (3.0 / 4.0, 4.0 / 3.0)
# torchvision tries this many random boxes before falling back to a centre crop.
_ATTEMPTS = 10
# The usual evaluation resize: shorter side size / 0.875 (256 for 224).
EVAL_CROP_FRACTION = 0.875


def random_resized_crop_boxes(
    widths: np.ndarray,
    heights: np.ndarray,
    rng: np.random.Generator,
    scale: tuple[float, float] = DEFAULT_SCALE,
    ratio: tuple[float, float] = DEFAULT_RATIO,
) -> np.ndarray:
    """Integer boxes ``(x, y, w, h)``, one row per image, as torchvision's RandomResizedCrop draws them."""
    widths = np.asarray(widths, dtype=np.int64)
    heights = np.asarray(heights, dtype=np.int64)
    count = len(widths)
    area = (widths * heights).astype(np.float64)
    share = rng.uniform(scale[0], scale[1], size=(count, _ATTEMPTS))
    log_ratio = rng.uniform(math.log(ratio[0]), math.log(ratio[1]), size=(count, _ATTEMPTS))
    aspect = np.exp(log_ratio)
    target = area[:, None] * share
    crop_w = np.rint(np.sqrt(target * aspect)).astype(np.int64)
    crop_h = np.rint(np.sqrt(target / aspect)).astype(np.int64)
    ok = (crop_w > 0) & (crop_h > 0) & (crop_w <= widths[:, None]) & (crop_h <= heights[:, None])
    first = np.argmax(ok, axis=1)
    found = ok[np.arange(count), first]
    w = crop_w[np.arange(count), first]
    h = crop_h[np.arange(count), first]
    # Fallback (no try fitted): the largest centre crop whose aspect is clamped into ``ratio``.
    in_ratio = widths / np.maximum(heights, 1)
    fb_w = np.where(in_ratio < ratio[0], widths, np.where(in_ratio > ratio[1], np.rint(heights * ratio[1]), widths))
    fb_h = np.where(in_ratio < ratio[0], np.rint(widths / ratio[0]), heights)
    fb_w = fb_w.astype(np.int64)
    fb_h = fb_h.astype(np.int64)
    w = np.where(found, w, fb_w)
    h = np.where(found, h, fb_h)
    # Positions: uniform integers in [0, side - crop], drawn for every row to keep the stream fixed.
    ux = rng.random(count)
    uy = rng.random(count)
    x = np.where(found, np.floor(ux * (widths - w + 1)), (widths - w) // 2).astype(np.int64)
    y = np.where(found, np.floor(uy * (heights - h + 1)), (heights - h) // 2).astype(np.int64)
    return np.stack([x, y, w, h], axis=1)


def center_crop_boxes(widths: np.ndarray, heights: np.ndarray, size: int, resize: int | None = None) -> np.ndarray:
    """Float boxes ``(x, y, w, h)`` equal to ``Resize(resize)`` (shorter side) then ``CenterCrop(size)``.

    ``resize`` defaults to ``round(size / 0.875)``. When the resized image would be smaller than
    ``size`` on an axis, the box covers that whole axis (the caller's resize then stretches).
    """
    resize = resize if resize is not None else int(round(size / EVAL_CROP_FRACTION))
    widths = np.asarray(widths, dtype=np.float64)
    heights = np.asarray(heights, dtype=np.float64)
    factor = np.minimum(widths, heights) / resize
    side_w = np.minimum(size * factor, widths)
    side_h = np.minimum(size * factor, heights)
    x = (widths - side_w) / 2.0
    y = (heights - side_h) / 2.0
    return np.stack([x, y, side_w, side_h], axis=1)
