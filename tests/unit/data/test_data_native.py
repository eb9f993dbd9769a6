"""stave's native module (src/stave/_native/jpeg_region.c): region decode and fused normalize, direct calls.

The loader-level behaviour (crops matching Pillow on both decode paths) is in test_data_decode.py.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import jpeg_bytes, photo
from stave.data import decode as dec
from stave.data.native import native_available, native_module

pytestmark = pytest.mark.skipif(
    not native_available(), reason="stave._jpeg_region is not built here (no compiler or libjpeg-turbo headers at install)"
)



def test_native_region_is_exact_inside_the_box_for_every_subsampling_and_scale() -> None:
    native = native_module()
    rng = np.random.default_rng(5)
    base = Image.fromarray(np.asarray(photo().resize((360, 250))))
    for subsampling in (0, 1, 2):  # 4:4:4, 4:2:2, 4:2:0
        data = jpeg_bytes(base, subsampling=subsampling)
        for denom in (1, 2, 4, 8):
            full = np.asarray(Image.open(io.BytesIO(data)).convert("RGB")) if denom == 1 else None
            scaled_w, scaled_h = -(-360 // denom), -(-250 // denom)
            reference = dec.get_backend().decode_rgb(data, 360, 250, denom, strict=True) if full is None else full
            out = np.empty(scaled_w * scaled_h * 3 + 4096, np.uint8)
            for _ in range(6):
                w, h = (int(v) for v in rng.integers(1, [scaled_w, scaled_h]))
                x, y = int(rng.integers(0, scaled_w - w + 1)), int(rng.integers(0, scaled_h - h + 1))
                x0, width, height = native.decode_region(data, denom, x, y, w, h, out)
                assert x0 <= x and x0 + width >= x + w and height == h
                got = out[: width * height * 3].reshape(height, width, 3)
                # Two pixels in from the region's edges the chroma upsampler had all its neighbours.
                inner = (slice(2, max(2, h - 2)), slice(x - x0 + 2, max(x - x0 + 2, x - x0 + w - 2)))
                want = reference[y : y + h, x0 : x0 + width]
                assert np.array_equal(got[inner], want[inner]), (subsampling, denom, (x, y, w, h))


def test_native_region_rejects_bad_calls_and_hostile_streams() -> None:
    native = native_module()
    data = jpeg_bytes(photo())
    out = np.empty(240 * 160 * 3, np.uint8)
    with pytest.raises(ValueError, match="denom"):
        native.decode_region(data, 3, 0, 0, 10, 10, out)
    with pytest.raises(ValueError, match="outside"):
        native.decode_region(data, 1, 500, 0, 10, 10, out)
    with pytest.raises(ValueError, match="outside"):
        native.decode_region(data, 1, 2**31 - 1, 2**31 - 1, 2**31 - 1, 2**31 - 1, out)  # x + w overflows an int
    with pytest.raises(ValueError, match="outside"):
        native.decode_region(data, 1, -(2**31), -(2**31), 2**31 - 1, 2**31 - 1, out)  # ends left of the image
    # A region hanging over every edge is clamped to the image: a full decode.
    assert native.decode_region(data, 1, -5, -5, 10_000, 10_000, out) == (0, 240, 160)
    with pytest.raises(ValueError, match="smaller"):
        native.decode_region(data, 1, 0, 0, 240, 160, out[:100])
    with pytest.raises(ValueError):
        native.decode_region(data[: len(data) // 2], 1, 0, 0, 240, 160, out)  # truncated: a corrupt-data warning
    with pytest.raises(ValueError):
        native.decode_region(b"\xff\xd8\xff\xe0garbage", 1, 0, 0, 10, 10, out)
    with pytest.raises(TypeError):
        native.decode_region(data, 1, 0, 0, 10, 10, bytes(100))  # a read-only output buffer


def test_native_planar_normalize_is_bit_identical_to_torch() -> None:
    native = native_module()
    rng = np.random.default_rng(2)
    image = rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)
    scale = torch.tensor([1 / (255 * 0.229), 1 / (255 * 0.224), 1 / (255 * 0.225)]).view(3, 1, 1)
    shift = torch.tensor([0.485 / 0.229, 0.456 / 0.224, 0.406 / 0.225]).view(3, 1, 1)
    for flip in (False, True):
        source = image[:, ::-1] if flip else image
        expected = torch.from_numpy(np.ascontiguousarray(source.transpose(2, 0, 1))).float().mul_(scale).sub_(shift)
        got = torch.empty(3, 37, 53)
        scale_args, shift_args = tuple(scale.flatten().tolist()), tuple(shift.flatten().tolist())
        native.planar_normalize(image, got.numpy(), 37, 53, scale_args, shift_args, flip)
        assert torch.equal(got, expected)
    with pytest.raises(ValueError, match="too small"):
        native.planar_normalize(image, torch.empty(3, 10, 10).numpy(), 37, 53, (1.0, 1.0, 1.0), (0.0, 0.0, 0.0), False)
