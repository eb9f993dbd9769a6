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
from stave.data.jpeg import read_jpeg_info
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


def _markers(data: bytes) -> list[int]:
    """Every marker code in a JPEG, entropy-coded data included (0xFF00 stuffing and fill skipped)."""
    codes, i = [], 0
    while (i := data.find(b"\xff", i)) != -1 and i + 1 < len(data):
        if data[i + 1] not in (0x00, 0xFF):
            codes.append(data[i + 1])
        i += 2 if data[i + 1] != 0xFF else 1
    return codes


def _subsampled(subsampling: int, size: tuple[int, int] = (360, 250), **kw) -> bytes:
    return jpeg_bytes(Image.fromarray(np.asarray(photo().resize(size))), subsampling=subsampling, **kw)


def test_add_restarts_is_lossless_and_marks_narrow_intervals() -> None:
    native = native_module()
    cases = [_subsampled(s) for s in (0, 1, 2)]  # 4:4:4, 4:2:2, 4:2:0
    cases += [jpeg_bytes(photo().convert("L")), jpeg_bytes(photo(), progressive=True)]
    for data in cases:
        coded = native.add_restarts(data, 32)
        before = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        after = np.asarray(Image.open(io.BytesIO(coded)).convert("RGB"))
        assert np.array_equal(before, after)  # same coefficients: every pixel the same
        markers = _markers(coded)
        assert 0xDD in markers and 0xC2 not in markers  # DRI, and baseline even from a progressive source
        restarts = [m for m in markers if 0xD0 <= m <= 0xD7]
        assert restarts[:9] == [0xD0 + k % 8 for k in range(min(9, len(restarts)))]
        info = read_jpeg_info(coded, "coded")
        gray = info.components == 1
        mcu_w = 8 if gray else 8 * max(h for h, _ in info.subsampling)
        mcu_h = 8 if gray else 8 * max(v for _, v in info.subsampling)
        per_row = -(-info.width // mcu_w)
        # The widest interval of at most 32 px that divides an MCU row; one marker between intervals.
        interval = max(d for d in range(1, max(1, 32 // mcu_w) + 1) if per_row % d == 0)
        assert len(restarts) == -(-info.height // mcu_h) * per_row // interval - 1
        assert len(coded) < len(data) * 1.1
    with pytest.raises(ValueError):
        native.add_restarts(cases[0][: len(cases[0]) // 2], 32)  # truncated: refused, never half-coded
    with pytest.raises(ValueError, match="max_interval_px"):
        native.add_restarts(cases[0], 0)


def test_restart_cut_gives_the_same_crop_pixels_as_a_full_decode() -> None:
    native = native_module()
    rng = np.random.default_rng(11)
    sources = [native.add_restarts(_subsampled(s), 32) for s in (0, 1, 2)]
    sources.append(native.add_restarts(jpeg_bytes(photo().convert("L").resize((300, 200))), 32))
    # Restart layouts other encoders write: whole rows per interval, and intervals that wrap across
    # rows (no rectangle of them is an image: the decoder must notice and decode the whole stream).
    sources.append(_subsampled(2, restart_marker_rows=1))
    sources.append(_subsampled(2, restart_marker_rows=3))
    sources.append(_subsampled(2, restart_marker_blocks=7))
    for data in sources:
        info = read_jpeg_info(data, "source")
        for denom in (1, 2, 4, 8):
            reference = dec.get_backend().decode_rgb(data, info.width, info.height, denom, strict=True)
            scaled_h, scaled_w = reference.shape[:2]
            out = np.empty(scaled_w * scaled_h * 3, np.uint8)
            for _ in range(8):
                w, h = (int(v) for v in rng.integers(1, [scaled_w + 1, scaled_h + 1]))
                x, y = int(rng.integers(0, scaled_w - w + 1)), int(rng.integers(0, scaled_h - h + 1))
                for restarts in (True, False):
                    assert native.decode_crop(data, denom, x, y, w, h, 2, out, True, restarts) == (w, h)
                    got = out[: w * h * 3].reshape(h, w, 3)
                    assert np.array_equal(got, reference[y : y + h, x : x + w]), (info, denom, (x, y, w, h), restarts)


def test_decode_crop_rejects_bad_calls() -> None:
    native = native_module()
    data = native.add_restarts(jpeg_bytes(photo()), 32)
    out = np.empty(240 * 160 * 3, np.uint8)
    with pytest.raises(ValueError, match="not inside"):
        native.decode_crop(data, 1, 200, 0, 100, 10, 2, out)  # sticks out of the 240 px wide image
    with pytest.raises(ValueError, match="bad crop"):
        native.decode_crop(data, 1, -1, 0, 10, 10, 2, out)
    with pytest.raises(ValueError, match="bad crop"):
        native.decode_crop(data, 1, 0, 0, 10, 10, 1000, out)  # margin
    with pytest.raises(ValueError, match="smaller"):
        native.decode_crop(data, 1, 0, 0, 100, 100, 2, out[:100])
    with pytest.raises(ValueError, match="denom"):
        native.decode_crop(data, 5, 0, 0, 10, 10, 2, out)


def test_damaged_restart_coded_files_fail_cleanly() -> None:
    """A hostile or damaged file must give ValueError or a decode, never a crash, a hang or a silent grey."""
    native = native_module()
    data = native.add_restarts(_subsampled(2), 32)
    out = np.empty(360 * 250 * 3, np.uint8)
    first_rst = next(i for i in range(len(data) - 1) if data[i] == 0xFF and data[i + 1] == 0xD0)
    # Out-of-sequence numbering: the cut is refused and libjpeg's resync warning fails the strict decode.
    swapped = bytearray(data)
    swapped[first_rst + 1] = 0xD3
    with pytest.raises(ValueError):
        native.decode_crop(bytes(swapped), 1, 100, 100, 50, 50, 2, out)
    # Truncated inside the entropy-coded data, before the crop's intervals.
    with pytest.raises(ValueError):
        native.decode_crop(data[: first_rst + 40], 1, 100, 200, 50, 40, 2, out)
    rng = np.random.default_rng(3)
    for _ in range(1500):
        mutated = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            mutated[int(rng.integers(2, len(mutated)))] = int(rng.integers(0, 256))
        if rng.random() < 0.3:
            mutated = mutated[: int(rng.integers(2, len(mutated)))]
        w, h = (int(v) for v in rng.integers(1, 120, 2))
        x, y = int(rng.integers(0, 360 - w)), int(rng.integers(0, 250 - h))
        try:
            native.decode_crop(bytes(mutated), int(rng.choice([1, 2, 4])), x // 4, y // 4, w // 4 + 1, h // 4 + 1, 2, out)
        except ValueError:
            pass


def test_planar_normalize_mirrors_rows_wider_than_its_chunk() -> None:
    """The vectorized path mirrors through 512-pixel chunks: a wider row must come out whole."""
    native = native_module()
    image = np.random.default_rng(4).integers(0, 256, (3, 1100, 3), dtype=np.uint8)
    scale = torch.tensor([0.5, 0.25, 2.0]).view(3, 1, 1)
    shift = torch.tensor([1.0, -3.0, 0.125]).view(3, 1, 1)
    for flip in (False, True):
        source = image[:, ::-1] if flip else image
        expected = torch.from_numpy(np.ascontiguousarray(source.transpose(2, 0, 1))).float().mul_(scale).sub_(shift)
        got = torch.empty(3, 3, 1100)
        native.planar_normalize(image, got.numpy(), 3, 1100, (0.5, 0.25, 2.0), (1.0, -3.0, 0.125), flip)
        assert torch.equal(got, expected)


def test_restart_cut_is_a_smaller_jpeg_only_where_intervals_line_up_with_rows() -> None:
    native = native_module()
    stave_coded = native.add_restarts(_subsampled(2), 32)  # 4:2:0: 16 px MCUs, 2 per interval
    cut = native.cut_restart_intervals(stave_coded, 100, 120, 150, 180)
    assert cut is not None
    sub, origin_x, origin_y = cut
    assert (origin_x, origin_y) == (96, 112)  # interval and MCU-row boundaries at or before the box
    width, height = Image.open(io.BytesIO(sub)).size
    assert (width, height) == (160 - 96, 192 - 112)  # out to the next boundaries after it
    assert len(sub) < len(stave_coded) / 4
    full = np.asarray(Image.open(io.BytesIO(stave_coded)).convert("RGB"))
    part = np.asarray(Image.open(io.BytesIO(sub)).convert("RGB"))
    # Away from the cut's edges (where the chroma upsampler lacks neighbours) the pixels are the same.
    assert np.array_equal(part[2:-2, 2:-2], full[origin_y + 2 : origin_y + height - 2, origin_x + 2 : origin_x + width - 2])
    # Whole-row intervals (Pillow's restart_marker_rows) cut vertically; wrapping ones, the whole
    # image and files without markers are not cut.
    rows = native.cut_restart_intervals(_subsampled(2, restart_marker_rows=3), 100, 120, 150, 180)
    assert rows is not None and rows[1:] == (0, 96) and Image.open(io.BytesIO(rows[0])).size == (360, 192 - 96)  # 48 px spans
    assert native.cut_restart_intervals(_subsampled(2, restart_marker_blocks=7), 100, 120, 150, 180) is None
    assert native.cut_restart_intervals(stave_coded, 0, 0, 360, 250) is None
    assert native.cut_restart_intervals(_subsampled(2), 100, 120, 150, 180) is None
    assert native.cut_restart_intervals(stave_coded[:400], 100, 120, 150, 180) is None
