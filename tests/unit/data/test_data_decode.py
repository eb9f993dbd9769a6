"""Crop-aware decode: agreement with Pillow, reduced-scale rules, the row cut, hostile headers.

Every test runs twice: with stave's native region decode (skipped where it is not built) and with the
Python bindings alone (``STAVE_NATIVE=0``), the path users without a compiler get.
"""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from conftest import IMAGES, big_photo_jpeg, jpeg_bytes, photo
from stave.data import decode as dec
from stave.data.crop import center_crop_boxes, random_resized_crop_boxes
from stave.data.jpeg import read_jpeg_info, with_frame_height
from stave.data.native import NATIVE_ENV, native_available
from stave.data.resize import crop_resize_into
from stave.data.scratch import SCRATCH_KEEP_BYTES, Scratch, thread_scratch
from stave.errors import FormatError

# The tolerances: mean absolute difference at full scale, PSNR for reduced-scale decodes.
MAX_MAD_FULL = 2.0
MIN_PSNR_DB = 30.0


def pillow_reference(data: bytes, box: dec.CropBox, size: int) -> np.ndarray:
    """Pillow full decode + crop + antialiased bilinear resize (what torchvision does on PIL images)."""
    image = Image.open(io.BytesIO(data)).convert("RGB")
    out = image.resize((size, size), Image.Resampling.BILINEAR, box=(box.x, box.y, box.x + box.w, box.y + box.h))
    return np.asarray(out).astype(np.float64)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


@pytest.fixture(params=["native", "bindings"], autouse=True)
def decode_path(request, monkeypatch) -> str:
    if request.param == "bindings":
        monkeypatch.setenv(NATIVE_ENV, "0")
    elif not native_available():
        pytest.skip("stave._jpeg_region is not built here (no compiler or libjpeg-turbo headers at install)")
    return request.param


@pytest.fixture(scope="module")
def backend():
    return dec.get_backend()


@pytest.mark.parametrize("name", ["chelsea_240x160.jpg", "rocket_restart_160x107.jpg", "astronaut_444_128x128.jpg", "camera_gray_128x128.jpg", "coffee_progressive_180x120.jpg"])
def test_full_scale_crops_match_pillow(name: str, backend) -> None:
    data = (IMAGES / name).read_bytes()
    info = read_jpeg_info(data)
    rng = np.random.default_rng(1)
    boxes = random_resized_crop_boxes(np.full(12, info.width), np.full(12, info.height), rng)
    for x, y, w, h in boxes:
        box = dec.CropBox(float(x), float(y), float(w), float(h))
        out, how = dec.decode_jpeg_crop(data, box, 64, 64, backend, allow_reduced=False)
        assert how.scale_denom == 1
        mad = np.abs(out.numpy().astype(np.float64) - pillow_reference(data, box, 64)).mean()
        assert mad <= MAX_MAD_FULL, (name, (x, y, w, h), mad)


def test_reduced_scale_decode_is_used_and_close_to_pillow(backend) -> None:
    data = big_photo_jpeg(960, 640)
    boxes = center_crop_boxes(np.array([960]), np.array([640]), 64)
    box = dec.CropBox(*map(float, boxes[0]))
    out, how = dec.decode_jpeg_crop(data, box, 64, 64, backend)
    assert how.scale_denom > 1
    assert psnr(out.numpy(), pillow_reference(data, box, 64)) >= MIN_PSNR_DB


def test_scale_never_lets_the_crop_fall_below_the_output() -> None:
    rng = np.random.default_rng(0)
    for _ in range(500):
        w, h = rng.uniform(1, 2000, size=2)
        out_w, out_h = rng.integers(1, 400, size=2)
        denom = dec.choose_scale(dec.CropBox(0, 0, w, h), int(out_w), int(out_h))
        assert w / denom >= out_w or denom == 1
        assert h / denom >= out_h or denom == 1
        if denom == 1:
            assert not (w / 2 >= out_w and h / 2 >= out_h)  # a 1/2 decode would have been allowed


@pytest.mark.parametrize("name", ["chelsea_240x160.jpg", "rocket_restart_160x107.jpg"])
def test_row_cut_decodes_exactly_the_same_pixels(name: str, backend) -> None:
    data = (IMAGES / name).read_bytes()
    info = read_jpeg_info(data)
    box = dec.CropBox(10.0, 5.0, 90.0, 50.0)  # top part: most rows may be skipped
    cut, how = dec.decode_jpeg_crop(data, box, 48, 48, backend)
    full, how_full = dec.decode_jpeg_crop(data, box, 48, 48, backend, allow_rows=False)
    assert how.rows_decoded < info.height == how_full.rows_decoded
    assert np.array_equal(cut.numpy(), full.numpy())


def test_frame_height_rewrite_touches_only_the_height() -> None:
    data = (IMAGES / "chelsea_240x160.jpg").read_bytes()
    info = read_jpeg_info(data)
    short = with_frame_height(data, info, 32)
    assert read_jpeg_info(bytes(short)).height == 32
    assert sum(a != b for a, b in zip(data, short)) <= 2 and len(short) == len(data)
    with pytest.raises(ValueError):
        with_frame_height((IMAGES / "coffee_progressive_180x120.jpg").read_bytes(), read_jpeg_info((IMAGES / "coffee_progressive_180x120.jpg").read_bytes()), 16)


def test_pillow_fallback_matches_libjpeg_turbo_path(backend) -> None:
    data = big_photo_jpeg(400, 300)
    box = dec.CropBox(30.0, 20.0, 250.0, 200.0)
    fast, _ = dec.decode_jpeg_crop(data, box, 96, 96, backend)
    slow, _ = dec.decode_jpeg_crop(data, box, 96, 96, None)
    assert np.abs(fast.numpy().astype(int) - slow.numpy().astype(int)).mean() <= MAX_MAD_FULL


def test_png_and_gray_decode_to_rgb(backend) -> None:
    png = (IMAGES / "coffee_96x64.png").read_bytes()
    out, _ = dec.decode_encoded_crop(png, dec.CropBox(0, 0, 96, 64), 32, 32, backend)
    assert tuple(out.shape) == (32, 32, 3)
    gray = dec.decode_full((IMAGES / "camera_gray_128x128.jpg").read_bytes(), backend)
    assert gray.shape == (128, 128, 3) and np.array_equal(gray[..., 0], gray[..., 2])


def test_flip_mirrors(backend) -> None:
    data = (IMAGES / "chelsea_240x160.jpg").read_bytes()
    box = dec.CropBox(0, 0, 240, 160)
    plain, _ = dec.decode_jpeg_crop(data, box, 60, 40, backend)
    mirrored, _ = dec.decode_jpeg_crop(data, box, 60, 40, backend, flip=True)
    assert np.array_equal(plain.numpy()[:, ::-1], mirrored.numpy())


def _with_dims(data: bytes, width: int, height: int) -> bytes:
    info = read_jpeg_info(data)
    out = bytearray(data)
    out[info.height_offset : info.height_offset + 4] = struct.pack(">HH", height, width)
    return bytes(out)


def test_hostile_jpegs_raise_format_errors(backend) -> None:
    data = (IMAGES / "chelsea_240x160.jpg").read_bytes()
    box = dec.CropBox(0, 0, 10, 10)
    with pytest.raises(FormatError, match="not a JPEG"):
        read_jpeg_info(b"GIF89a....")
    with pytest.raises(FormatError, match="runs past the end"):
        read_jpeg_info(data[:30])
    with pytest.raises(FormatError):
        read_jpeg_info(b"\xff\xd8\xff\xd9")
    bomb = _with_dims(data, 65000, 65000)
    with pytest.raises(FormatError, match="pixel limit"):
        dec.decode_jpeg_crop(bomb, box, 8, 8, backend)
    with pytest.raises(FormatError, match="zero sampling|size 0x"):
        read_jpeg_info(_with_dims(data, 0, 10))
    garbage = data[: len(data) // 3] + bytes(np.random.default_rng(0).integers(0, 255, 3000, dtype=np.uint8)) + b"\xff\xd9"
    with pytest.raises(FormatError, match="cannot decode"):
        dec.decode_full(garbage, backend)
    with pytest.raises(FormatError):
        dec.decode_full(data[: len(data) // 2], backend)  # truncated file: strict decode refuses


def test_unknown_backend_is_a_clear_error() -> None:
    from stave.errors import InputError

    with pytest.raises(InputError, match="unknown JPEG backend"):
        dec.get_backend("libjpeg9000")
    assert "pillow" in dec.available_backends()


def test_photo_helper_is_real() -> None:
    assert photo().size == (240, 160)
    assert len(jpeg_bytes(photo())) > 1000


def test_crop_results_never_alias_the_threads_scratch(backend) -> None:
    data = big_photo_jpeg(320, 240)
    first, _ = dec.decode_jpeg_crop(data, dec.CropBox(10.0, 10.0, 200.0, 150.0), 48, 48, backend)
    kept = first.numpy().copy()
    dec.decode_jpeg_crop(data, dec.CropBox(100.0, 60.0, 120.0, 90.0), 48, 48, backend, flip=True)
    assert np.array_equal(first.numpy(), kept)  # the second decode reused the scratch, not this result


def test_region_decode_lands_in_the_given_scratch(backend, decode_path: str) -> None:
    if backend is None or not backend.decodes_in_place:
        pytest.skip("the installed binding cannot decode into a caller's buffer")
    data = big_photo_jpeg(320, 240)
    scratch = Scratch()
    low = dec.decode_jpeg_region(data, dec.CropBox(50.0, 100.0, 200.0, 120.0), 32, 32, backend, allow_reduced=False, scratch=scratch)
    full = dec.decode_full(data, backend)
    if decode_path == "bindings":
        bottom = 100 + 120 + 1  # the crop's last row plus the resize filter's reach
        assert np.array_equal(low.pixels[:bottom], full[:bottom])  # row cut: the rows the crop reads, bit for bit
    else:
        # A region: the box's pixels, bit for bit, at the offsets the region reports.
        x0, y0, x1, y1 = (int(round(v)) for v in low.box)
        assert low.pixels.shape[1] < 320 and low.pixels.shape[0] < 240
        assert np.array_equal(low.pixels[y0:y1, x0:x1], full[100:220, 50:250])
    high = dec.decode_jpeg_region(data, dec.CropBox(0.0, 0.0, 100.0, 60.0), 32, 32, backend, allow_reduced=False, scratch=scratch)
    assert high.info.rows_decoded < low.info.rows_decoded < 240
    assert np.shares_memory(high.pixels, low.pixels)  # one buffer, reused: no per-image allocation


def test_crop_resize_into_matches_torch_and_pillow() -> None:
    pixels = np.asarray(photo())
    rng = np.random.default_rng(3)
    out = np.empty((40, 40, 3), np.uint8)
    for x, y, w, h in random_resized_crop_boxes(np.full(8, 240), np.full(8, 160), rng):
        box = (float(x), float(y), float(x + w), float(y + h))
        crop_resize_into(pixels, box, out, Scratch())
        crop = torch.from_numpy(np.ascontiguousarray(pixels[y : y + h, x : x + w])).unsqueeze(0).permute(0, 3, 1, 2)
        expected = F.interpolate(crop, size=(40, 40), mode="bilinear", antialias=True, align_corners=False)[0].permute(1, 2, 0)
        assert np.array_equal(out, expected.numpy())
        reference = np.asarray(photo().resize((40, 40), Image.Resampling.BILINEAR, box=box)).astype(np.float64)
        assert np.abs(out.astype(np.float64) - reference).mean() <= MAX_MAD_FULL
    with pytest.raises(ValueError, match="C-contiguous"):
        crop_resize_into(pixels, (0.0, 0.0, 10.0, 10.0), out[:, ::2], None)


def test_scratch_reuses_grows_and_caps_what_it_keeps() -> None:
    scratch = Scratch()
    small = scratch.array("decode", (10, 10, 3))
    again = scratch.array("decode", (5, 20, 3))
    assert np.shares_memory(small, again) and again.shape == (5, 20, 3)
    bigger = scratch.array("decode", (100, 100, 3))
    assert not np.shares_memory(small, bigger) and np.shares_memory(bigger, scratch.array("decode", (90, 90, 3)))
    assert not np.shares_memory(scratch.array("crop", (10, 10, 3)), bigger)  # one buffer per purpose
    huge = scratch.array("decode", (SCRATCH_KEEP_BYTES + 1,))
    assert not np.shares_memory(huge, scratch.array("decode", (SCRATCH_KEEP_BYTES + 1,)))  # not kept
    assert thread_scratch() is thread_scratch()

