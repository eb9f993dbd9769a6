"""The libjpeg-turbo bindings stave decodes JPEG with: simplejpeg, PyTurboJPEG, or none (Pillow).

A binding is chosen once by :func:`get_backend` (``$STAVE_JPEG_BACKEND`` wins, then simplejpeg, a
declared dependency, then PyTurboJPEG when its system library loads) and used through one method,
:meth:`JpegBackend.decode_rgb`, which also takes the DCT scale and, for bindings that can, an output
buffer to decode into.
"""

from __future__ import annotations

import logging
import os
from typing import Callable

import numpy as np

from stave.errors import InputError

log = logging.getLogger(__name__)

BACKEND_ENV = "STAVE_JPEG_BACKEND"


class JpegBackend:
    """A libjpeg-turbo binding: ``decode_rgb`` returns an HxWx3 uint8 RGB array."""

    name = "abstract"
    # True when decode_rgb writes into ``out`` (no per-call output allocation).
    decodes_in_place = False

    def decode_rgb(
        self,
        data: bytes | bytearray | memoryview,
        width: int,
        height: int,
        denom: int,
        strict: bool,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Decode to (ceil(height/denom), ceil(width/denom), 3) uint8; ``strict`` fails on warnings.

        ``out``, when given, is a flat uint8 buffer of at least that many bytes that a binding able to
        decode in place writes into (the result then views it); others ignore it.
        """
        raise NotImplementedError


class SimplejpegBackend(JpegBackend):
    """simplejpeg (libjpeg-turbo linked in; releases the GIL while decoding)."""

    name = "simplejpeg"
    decodes_in_place = True

    def __init__(self) -> None:
        import simplejpeg

        self._sj = simplejpeg

    def decode_rgb(self, data, width, height, denom, strict, out=None):  # noqa: D102 (documented on the base)
        if denom == 1:
            return self._sj.decode_jpeg(data, colorspace="RGB", strict=strict, buffer=out)
        # simplejpeg picks the smallest libjpeg scale whose output is at least min_width x
        # min_height; asking for exactly ceil(side/denom) selects 1/denom.
        return self._sj.decode_jpeg(
            data,
            colorspace="RGB",
            strict=strict,
            min_width=-(-width // denom),
            min_height=-(-height // denom),
            buffer=out,
        )


class TurbojpegBackend(JpegBackend):
    """PyTurboJPEG (needs the system libturbojpeg; ctypes releases the GIL during the call)."""

    name = "turbojpeg"

    def __init__(self) -> None:
        import turbojpeg

        self._tj = turbojpeg.TurboJPEG()
        self._pf = turbojpeg.TJPF_RGB

    def decode_rgb(self, data, width, height, denom, strict, out=None):  # noqa: D102
        # PyTurboJPEG has no output-buffer argument: ``out`` is ignored.
        # PyTurboJPEG reports decoder warnings (such as the skipped tail of a shortened frame) as
        # Python warnings, not errors, so ``strict`` only matters for simplejpeg.
        return self._tj.decode(bytes(data), pixel_format=self._pf, scaling_factor=(1, denom))


_BACKENDS: dict[str, Callable[[], JpegBackend]] = {
    "simplejpeg": SimplejpegBackend,
    "turbojpeg": TurbojpegBackend,
}
_backend_cache: dict[str, JpegBackend | None] = {}


def _try_backend(name: str) -> JpegBackend | None:
    if name not in _backend_cache:
        try:
            _backend_cache[name] = _BACKENDS[name]()
        except (ImportError, OSError, RuntimeError) as exc:
            # PyTurboJPEG imports fine but raises when libturbojpeg.so is missing.
            log.debug("JPEG backend %s unavailable: %s", name, exc)
            _backend_cache[name] = None
    return _backend_cache[name]


def available_backends() -> list[str]:
    """Names of the libjpeg-turbo bindings that load here, plus ``pillow`` (always)."""
    return [name for name in _BACKENDS if _try_backend(name) is not None] + ["pillow"]


def get_backend(name: str | None = None) -> JpegBackend | None:
    """The JPEG backend to use; ``None`` means Pillow.

    Default order: ``$STAVE_JPEG_BACKEND`` if set, then simplejpeg (a declared dependency), then
    PyTurboJPEG, then Pillow with ``draft()``. Naming an unavailable backend is an error.
    """
    wanted = name or os.environ.get(BACKEND_ENV) or None
    if wanted == "pillow":
        return None
    if wanted is not None:
        if wanted not in _BACKENDS:
            raise InputError(f"unknown JPEG backend {wanted!r}; choose one of {sorted(_BACKENDS) + ['pillow']}")
        backend = _try_backend(wanted)
        if backend is None:
            raise InputError(f"JPEG backend {wanted!r} is not installed here; available: {available_backends()}")
        return backend
    for candidate in _BACKENDS:
        backend = _try_backend(candidate)
        if backend is not None:
            return backend
    log.warning("no libjpeg-turbo binding (simplejpeg, PyTurboJPEG) found; decoding JPEG with Pillow")
    return None
