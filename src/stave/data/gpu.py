"""GPU JPEG decode: a batch of JPEG byte strings -> crops resized on the device (nvJPEG via torchvision).

For a machine whose CPU cannot keep up even with crop-aware decoding, the compressed bytes travel
to the GPU (5-10x fewer bytes than uint8 pixels) and ``torchvision.io.decode_jpeg(device="cuda")``
decodes the whole batch in one call; the crop, antialiased resize and flip then run on the device.
CUDA-only by nature; covered by ``@pytest.mark.cuda`` tests.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from stave.errors import FormatError


def decode_jpeg_batch(data: Sequence[bytes | memoryview], device: str | torch.device = "cuda") -> list[torch.Tensor]:
    """Decode JPEG byte strings on ``device`` in one batched call; each result is 3xHxW uint8 RGB."""
    from torchvision.io import ImageReadMode, decode_jpeg

    encoded = [torch.frombuffer(bytearray(item), dtype=torch.uint8) for item in data]
    try:
        return list(decode_jpeg(encoded, mode=ImageReadMode.RGB, device=device))
    except RuntimeError as exc:
        raise FormatError(f"GPU JPEG decode failed: {exc}") from exc


def crop_resize_batch(
    images: Sequence[torch.Tensor], boxes_xywh: np.ndarray, size: int, flips: np.ndarray | None = None
) -> torch.Tensor:
    """Crop each 3xHxW image to its box, resize (antialiased bilinear) to ``size``, stack as uint8 NCHW."""
    out = torch.empty((len(images), 3, size, size), dtype=torch.uint8, device=images[0].device if images else "cpu")
    for i, (image, box) in enumerate(zip(images, boxes_xywh)):
        x, y, w, h = (int(round(v)) for v in box)
        crop = image[:, y : y + max(1, h), x : x + max(1, w)].unsqueeze(0)
        resized = F.interpolate(crop.float(), size=(size, size), mode="bilinear", antialias=True, align_corners=False)
        resized = resized.round_().clamp_(0, 255).to(torch.uint8)[0]
        out[i] = resized.flip(2) if flips is not None and flips[i] else resized
    return out
