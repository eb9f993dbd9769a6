"""stave's optional native part: libjpeg-turbo's partial decode, a restart-marker transcode and a fused
normalize (C, src/stave/_native).

The module ``stave._jpeg_region`` is built at install time when a C compiler and libjpeg-turbo's
headers are present (setup.py); where it is not, everything here returns ``None`` and the loader uses
the Python bindings for the whole decode. ``$STAVE_NATIVE=0`` turns it off (for A/B measurements and
for ruling it out when something looks wrong).

:func:`native_module` returns the module (or ``None``); it has four functions:

* ``decode_region(data, denom, x, y, w, h, out, strict=True, restarts=True) -> (x0, width, height)``
  decodes only the iMCU columns around a region and skips the IDCT of the rows above it (libjpeg's
  ``jpeg_crop_scanline`` / ``jpeg_skip_scanlines``), which neither simplejpeg nor TurboJPEG 2.1's API
  exposes. On the benchmark's 500x375 photographs with RandomResizedCrop boxes: 0.65-0.78 of a full
  decode's CPU time, against 0.96 for the row cut through simplejpeg (docs/data.md). When the JPEG
  has restart markers that line up with its MCU rows (what stave pack stores), only the restart
  intervals around the region are entropy-decoded at all: 0.42-0.49 of a full decode.
* ``decode_crop(data, denom, x, y, w, h, margin, out, strict=True, restarts=True) -> (w, h)`` is the
  same decode for a crop plus ``margin`` pixels around it, writing only the crop, rows packed.
* ``add_restarts(data, max_interval_px) -> bytes`` re-codes a JPEG losslessly (the same DCT
  coefficients, so every decoded pixel is identical; optimized Huffman tables) with a restart marker
  every at most ``max_interval_px`` pixels of an MCU row: stave pack's stored form.
* ``planar_normalize(src, dst, height, width, scale, shift, flip)`` writes
  HxWx3 uint8 as normalized float32 CHW in one pass, bit-identical to torch's cast, ``mul_`` and ``sub_``.
"""

from __future__ import annotations

import logging
import os
from types import ModuleType

log = logging.getLogger(__name__)

NATIVE_ENV = "STAVE_NATIVE"

try:
    from stave import _jpeg_region as _module
except ImportError as exc:  # not built here: no compiler or no libjpeg-turbo headers at install time
    log.debug("stave._jpeg_region unavailable (%s); decoding whole images through the Python bindings", exc)
    _module = None


def native_module() -> ModuleType | None:
    """The native module, or None when it is not built or ``$STAVE_NATIVE`` is ``0``."""
    if os.environ.get(NATIVE_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    return _module


def native_available() -> bool:
    """True when the native module is built and enabled."""
    return native_module() is not None
