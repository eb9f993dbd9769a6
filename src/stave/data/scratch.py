"""Per-thread scratch buffers: the decode path's intermediates without a per-image allocation.

A decoded 500x375 RGB image is 560 KB, a crop a few hundred KB, a resized 224 px image 150 KB: all
above glibc's initial 128 KB ``mmap`` threshold. Allocated per image, each is a fresh mapping whose
pages fault in on first write, unless glibc's dynamic threshold happens to have been raised by an
earlier free (it usually has, in a process that has run torch for a while; it need not have). With
the threshold pinned at 128 KB the per-image path took 320 faults and ~0.8 ms of system time per
image; written into reused buffers, 34 faults (torch's resize keeps one temporary of its own) and
~0.25 ms (docs/data.md). :class:`Scratch` keeps one growable buffer per purpose and thread.
"""

from __future__ import annotations

import math
import threading

import numpy as np


# A scratch buffer that would grow past this is not kept: the request gets a one-off array, so one
# huge (or hostile) image cannot pin hundreds of MB per decode thread. 64 MiB holds a 4k x 5k RGB decode.
SCRATCH_KEEP_BYTES = 64 << 20
# Growth headroom: the next slightly larger image should not reallocate again.
_GROWTH = 1.25


class Scratch:
    """Reusable uint8 buffers of one thread, one per purpose (``"decode"``, ``"crop"``, ...)."""

    def __init__(self) -> None:
        self._buffers: dict[str, np.ndarray] = {}

    def array(self, purpose: str, shape: tuple[int, ...]) -> np.ndarray:
        """A C-contiguous uint8 array of ``shape`` backed by the ``purpose`` buffer (contents undefined).

        The array is overwritten by the next request for the same purpose in this thread; callers
        copy out what they keep.
        """
        nbytes = math.prod(shape)
        buffer = self._buffers.get(purpose)
        if buffer is None or buffer.size < nbytes:
            if nbytes > SCRATCH_KEEP_BYTES:
                return np.empty(shape, dtype=np.uint8)
            buffer = np.empty(min(SCRATCH_KEEP_BYTES, int(nbytes * _GROWTH)), dtype=np.uint8)
            self._buffers[purpose] = buffer
        return buffer[:nbytes].reshape(shape)

    def flat(self, purpose: str, nbytes: int) -> np.ndarray:
        """At least ``nbytes`` of the ``purpose`` buffer as a flat uint8 array (for decoders that size it)."""
        return self.array(purpose, (nbytes,))


_local = threading.local()


def thread_scratch() -> Scratch:
    """The calling thread's :class:`Scratch` (created on first use, freed with the thread)."""
    scratch = getattr(_local, "scratch", None)
    if scratch is None:
        scratch = _local.scratch = Scratch()
    return scratch
