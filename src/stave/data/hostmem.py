"""Host memory the decode path reuses instead of allocating: per-thread scratch and huge-page batches.

Two costs dominate what the decoder itself does not do, and both are first-touch page faults
(measured on the development VM, docs/data.md):

* **The decoder's output.** simplejpeg allocates a fresh array per call; a 500x375 RGB image is
  137 new 4 KiB pages, each faulted in on first write (~0.3 ms per image, a fifth of the decode).
  :class:`Scratch` keeps one growable buffer per purpose and thread, and the decoder writes into it.
* **The output batch.** A 256 x 3 x 224 x 224 float32 batch is 154 MB: ~37,600 faults when it is
  new. :func:`empty_batch` maps it with ``MADV_HUGEPAGE`` so the kernel backs it with 2 MiB pages
  (512 times fewer faults; about half the first-touch time measured).
"""

from __future__ import annotations

import logging
import math
import mmap
import threading

import numpy as np
import torch

log = logging.getLogger(__name__)

# A scratch buffer that would grow past this is not kept: the request gets a one-off array, so one
# huge (or hostile) image cannot pin hundreds of MB per decode thread. 64 MiB holds a 4k x 5k RGB decode.
SCRATCH_KEEP_BYTES = 64 << 20
# Growth headroom: the next slightly larger image should not reallocate again.
_GROWTH = 1.25
# Below this a batch is small enough that 4 KiB pages cost nothing worth a separate mapping.
HUGEPAGE_MIN_BYTES = 8 << 20


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


def empty_batch(shape: tuple[int, ...], dtype: torch.dtype, channels_last: bool = False) -> torch.Tensor:
    """An uninitialized CPU tensor of ``shape`` (NCHW), in huge pages where the kernel offers them.

    ``channels_last`` gives NHWC memory order for a 4-D shape. Falls back to ``torch.empty`` for small
    batches and where ``MADV_HUGEPAGE`` is unavailable (not Linux, THP disabled); the memory is
    returned to the system when the last tensor viewing it is freed.
    """
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    itemsize = torch.empty((), dtype=dtype).element_size()
    nbytes = math.prod(shape) * itemsize
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if nbytes < HUGEPAGE_MIN_BYTES or advice is None:
        return torch.empty(shape, dtype=dtype, memory_format=memory_format)
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        region.madvise(advice)
    except OSError as exc:  # THP compiled out or disabled: plain pages, same tensor
        log.debug("MADV_HUGEPAGE refused (%s); batch buffer uses 4 KiB pages", exc)
    # frombuffer keeps ``region`` alive as long as any tensor views it.
    flat = torch.frombuffer(region, dtype=dtype, count=math.prod(shape))
    if channels_last and len(shape) == 4:
        n, c, h, w = shape
        return flat.view(n, h, w, c).permute(0, 3, 1, 2)
    return flat.view(shape)
