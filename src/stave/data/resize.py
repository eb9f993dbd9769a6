"""Crop + antialiased bilinear resize of one uint8 image, on the host, in a decode thread.

The resize uses torch's ``interpolate(mode="bilinear", antialias=True)`` on a 3-channel uint8
channels-last tensor: that combination has a vectorized (AVX2) kernel whose output matches
Pillow's antialiased bilinear resize (the filter torchvision applies to PIL images) to within a
level, at about a quarter of Pillow's cost on the benchmark's images (docs/data.md). The crop is a
slice, copied once (row memcpy) into a contiguous buffer, which the vectorized kernel needs.
:func:`crop_resize_into` writes into the caller's buffer (the decode threads reuse theirs);
:func:`crop_resize` returns a new tensor.

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
import math
import os
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from stave.data.scratch import Scratch

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


def pixel_box(box: tuple[float, float, float, float], width: int, height: int) -> tuple[int, int, int, int]:
    """``box`` rounded to whole pixels and clamped inside a ``width`` x ``height`` image, never empty.

    Halves round up, not to even: a box shifted by whole pixels (a region decode's offset) must round
    to the same pixels shifted, which Python's banker's ``round`` does not (round(2.5) == 2, round(3.5) == 4).
    """
    x0 = min(max(0, math.floor(box[0] + 0.5)), width - 1)
    y0 = min(max(0, math.floor(box[1] + 0.5)), height - 1)
    x1 = max(x0 + 1, min(width, math.floor(box[2] + 0.5)))
    y1 = max(y0 + 1, min(height, math.floor(box[3] + 0.5)))
    return x0, y0, x1, y1


@functools.lru_cache(maxsize=1)
def _resize_out_op() -> Any:
    """The kernel behind ``F.interpolate(..., antialias=True)``, called with ``out=`` (None if absent).

    Writing into the caller's buffer avoids a 150 KB allocation per image, which glibc serves with a
    fresh ``mmap`` (37 page faults) whenever its dynamic threshold has not been raised. The C binding
    is what ``F.interpolate`` itself calls (``torch.ops.aten`` dispatch is ~8 us slower per call).
    """
    op = getattr(torch._C._nn, "_upsample_bilinear2d_aa", None)
    if op is None:
        log.debug("torch has no _upsample_bilinear2d_aa binding; resizing through F.interpolate")
        return None
    probe_in = torch.zeros((1, 3, 4, 4), dtype=torch.uint8).contiguous(memory_format=torch.channels_last)
    probe_out = torch.empty((1, 2, 2, 3), dtype=torch.uint8).permute(0, 3, 1, 2)
    try:
        op(probe_in, [2, 2], False, None, None, out=probe_out)
    except (TypeError, RuntimeError) as exc:  # a different signature in another torch version
        log.debug("out= resize unavailable (%s); resizing through F.interpolate", exc)
        return None
    return op


def crop_resize_into(
    pixels: np.ndarray, box: tuple[float, float, float, float], out: np.ndarray, scratch: Scratch | None = None
) -> None:
    """Crop ``pixels`` (HxWx3 uint8) to ``box`` = (x0, y0, x1, y1) and resize it into ``out``.

    ``out`` is a C-contiguous ``out_h x out_w x 3`` uint8 array; nothing is allocated per call when it
    and ``scratch`` (where a non-contiguous crop is copied) are reused. Box edges are rounded to whole
    pixels (a shift of at most half a pixel of the decoded image).
    """
    if out.dtype != np.uint8 or out.ndim != 3 or out.shape[2] != 3 or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous HxWx3 uint8 array, got {out.shape} {out.dtype}")
    out_h, out_w = out.shape[:2]
    x0, y0, x1, y1 = pixel_box(box, pixels.shape[1], pixels.shape[0])
    region = pixels[y0:y1, x0:x1]
    if (x1 - x0, y1 - y0) == (out_w, out_h):
        np.copyto(out, region)
        return
    if not (region.flags.c_contiguous and region.flags.writeable):
        # A full-width crop of a writable decode is already contiguous: no copy at all. Otherwise numpy
        # copies the rows (memcpy); torch's strided copy of the same was ~3x slower.
        copy = scratch.array("crop", region.shape) if scratch is not None else np.empty(region.shape, np.uint8)
        np.copyto(copy, region)
        region = copy
    # Channels-last memory (NHWC seen as NCHW): the vectorized uint8 kernel's input and output layout.
    source = torch.from_numpy(region).unsqueeze(0).permute(0, 3, 1, 2)
    target = torch.from_numpy(out).unsqueeze(0).permute(0, 3, 1, 2)
    op = _resize_out_op()
    if op is not None:
        op(source, [out_h, out_w], False, None, None, out=target)
    else:
        target.copy_(F.interpolate(source, size=(out_h, out_w), mode="bilinear", antialias=True, align_corners=False))


def crop_resize(
    pixels: np.ndarray,
    box: tuple[float, float, float, float],
    out_w: int,
    out_h: int,
    flip: bool = False,
    scratch: Scratch | None = None,
) -> torch.Tensor:
    """Crop ``pixels`` (HxWx3 uint8) to ``box`` = (x0, y0, x1, y1), resize to a new ``out_h x out_w x 3`` tensor.

    Mirrored left-right when ``flip``. The result never shares memory with ``pixels`` or ``scratch``.
    """
    result = np.empty((out_h, out_w, 3), dtype=np.uint8)
    crop_resize_into(pixels, box, result, scratch)
    if flip:
        result = np.ascontiguousarray(result[:, ::-1])
    return torch.from_numpy(result)
