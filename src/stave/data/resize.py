"""Crop + antialiased bilinear resize of one uint8 image, on the host, in a decode thread.

The resize uses torch's ``interpolate(mode="bilinear", antialias=True)`` on a 3-channel uint8
channels-last tensor: that combination has a vectorized (AVX2) kernel whose output matches
Pillow's antialiased bilinear resize (the filter torchvision applies to PIL images) to within a
level, at about a quarter of Pillow's cost on the benchmark's images (docs/data.md). The crop is a
slice, copied once into channels-last order, which the vectorized kernel needs.

Decode threads call torch concurrently. Each call would otherwise start its own OpenMP team of
``torch.get_num_threads()`` threads, oversubscribing the cores the decode threads already fill;
:func:`serial_torch_in_this_thread` limits only the calling thread (OpenMP's thread count is a
per-thread setting), leaving the user's threads untouched.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import logging
import os

import numpy as np
import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def _openmp() -> ctypes.CDLL | None:
    """The OpenMP runtime torch is linked with (already loaded; CDLL returns the same handle)."""
    libdir = os.path.join(os.path.dirname(torch.__file__), "lib")
    for pattern in ("libgomp*.so*", "libiomp5*.so*", "libomp*.so*"):
        for path in sorted(glob.glob(os.path.join(libdir, pattern))):
            try:
                lib = ctypes.CDLL(path)
            except OSError as exc:
                log.debug("cannot load %s: %s", path, exc)
                continue
            if hasattr(lib, "omp_set_num_threads"):
                return lib
    return None


def serial_torch_in_this_thread() -> bool:
    """Make torch ops called from this thread run on this thread only; True when it could.

    torch sets each new thread's OpenMP thread count on its first parallel op, so that
    initialization is triggered first and then overridden for this thread alone.
    """
    if "OpenMP" not in torch.__config__.parallel_info():
        return False
    torch.get_num_threads()  # triggers torch's per-thread OpenMP initialization
    lib = _openmp()
    if lib is None:
        log.debug("no OpenMP runtime found next to torch; decode threads may oversubscribe the cores")
        return False
    lib.omp_set_num_threads(1)
    return True


def crop_resize(
    pixels: np.ndarray,
    box: tuple[float, float, float, float],
    out_w: int,
    out_h: int,
    flip: bool = False,
) -> torch.Tensor:
    """Crop ``pixels`` (HxWx3 uint8) to ``box`` = (x0, y0, x1, y1), resize to ``out_h x out_w x 3``.

    Box edges are rounded to whole pixels (a shift of at most half a pixel of the decoded image).
    Returns an HWC uint8 tensor (possibly a strided view), mirrored left-right when ``flip``.
    """
    height, width = pixels.shape[:2]
    x0 = min(max(0, int(round(box[0]))), width - 1)
    y0 = min(max(0, int(round(box[1]))), height - 1)
    x1 = max(x0 + 1, min(width, int(round(box[2]))))
    y1 = max(y0 + 1, min(height, int(round(box[3]))))
    if (x1 - x0, y1 - y0) == (out_w, out_h):
        # np.array: a writable copy (torch will not wrap read-only mapped or Pillow memory silently).
        result = torch.from_numpy(np.array(pixels[y0:y1, x0:x1]))
    else:
        # numpy copies the crop row by row (memcpy); torch's strided copy of the same was ~3x slower.
        region = pixels[y0:y1, x0:x1]
        if not (region.flags.c_contiguous and region.flags.writeable):
            region = np.array(region)
        crop = torch.from_numpy(region)
        nhwc = crop.unsqueeze(0).permute(0, 3, 1, 2)  # channels-last memory: the vectorized kernel's input
        resized = F.interpolate(nhwc, size=(out_h, out_w), mode="bilinear", antialias=True, align_corners=False)
        result = resized[0].permute(1, 2, 0)
    if flip:
        return result.flip(1)  # a copy, contiguous
    return result  # may be a strided view: callers copy it into their batch anyway
