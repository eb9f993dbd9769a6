"""JPEG header facts read straight from the markers, without decoding any pixels.

The crop-aware decoder needs the image size before it decodes (to choose the crop box), and it needs
to know whether a file is a single-scan sequential JPEG, because only then may it shorten the frame:
it rewrites the frame height in the SOF marker so that libjpeg-turbo stops after the last row the
crop needs, and skips the rest of the entropy-coded data as trailing bytes. Everything here is pure
Python over ``bytes``/``memoryview`` and treats its input as hostile: every length is checked
against the buffer, and a malformed header raises :class:`~stave.errors.FormatError`.
"""

from __future__ import annotations

from dataclasses import dataclass

from stave.errors import FormatError

# Start-of-frame markers: 0xC0 baseline, 0xC1 extended sequential, 0xC2 progressive, 0xC3 lossless,
# 0xC5-0xC7 and 0xC9-0xCB / 0xCD-0xCF the hierarchical and arithmetic variants. 0xC4 (DHT), 0xC8
# (JPG extension) and 0xCC (DAC) share the range but are not frames.
_SOF_MARKERS = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
# Huffman-coded sequential frames: the only ones whose height may be shortened safely.
_SEQUENTIAL_HUFFMAN = frozenset({0xC0, 0xC1})
_SOI = 0xD8
_EOI = 0xD9
_SOS = 0xDA
# Markers without a length field (RSTn, SOI, EOI, TEM).
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8), _SOI, _EOI})
# JPEG's frame size fields are 16 bits wide.
MAX_JPEG_SIDE_PX = 65535


@dataclass(frozen=True)
class JpegInfo:
    """What the markers before the first scan say.

    ``height_offset`` is the byte offset of the SOF's 16-bit height field. ``truncatable`` is True
    for a sequential Huffman JPEG whose first scan carries every component (one interleaved scan),
    the case where a shortened frame decodes the top rows exactly as a full decode does.
    ``mcu_height_px`` is the height of one MCU row (8 times the largest vertical sampling factor).
    """

    width: int
    height: int
    components: int
    precision: int
    progressive: bool
    truncatable: bool
    mcu_height_px: int
    height_offset: int
    subsampling: tuple[tuple[int, int], ...]


def is_jpeg(data: bytes | memoryview) -> bool:
    """True when ``data`` starts with a JPEG SOI marker followed by another marker."""
    return len(data) >= 4 and data[0] == 0xFF and data[1] == _SOI and data[2] == 0xFF


def read_jpeg_info(data: bytes | memoryview, name: str = "JPEG") -> JpegInfo:
    """Parse the markers of ``data`` up to the first scan header (SOS).

    Raises :class:`FormatError` naming ``name`` when the stream is not a JPEG, a segment runs past
    the end, or no frame header precedes the first scan.
    """
    size = len(data)
    if not is_jpeg(data):
        raise FormatError(f"{name}: not a JPEG (no SOI marker)")
    pos = 2
    frame: tuple[int, int, int, int, int, tuple[tuple[int, int], ...], int] | None = None
    while True:
        # Fill bytes (0xFF repeated) may precede a marker.
        while pos < size and data[pos] == 0xFF and pos + 1 < size and data[pos + 1] == 0xFF:
            pos += 1
        if pos + 1 >= size or data[pos] != 0xFF:
            raise FormatError(f"{name}: expected a marker at byte {pos}, found none before the first scan")
        marker = data[pos + 1]
        pos += 2
        if marker in _STANDALONE:
            if marker == _EOI:
                raise FormatError(f"{name}: end of image before any scan")
            continue
        if pos + 2 > size:
            raise FormatError(f"{name}: segment length at byte {pos} runs past the end ({size} bytes)")
        length = (data[pos] << 8) | data[pos + 1]
        if length < 2 or pos + length > size:
            raise FormatError(f"{name}: segment of length {length} at byte {pos} runs past the end ({size} bytes)")
        if marker in _SOF_MARKERS:
            if length < 8:
                raise FormatError(f"{name}: frame header too short ({length} bytes)")
            precision = data[pos + 2]
            height = (data[pos + 3] << 8) | data[pos + 4]
            width = (data[pos + 5] << 8) | data[pos + 6]
            count = data[pos + 7]
            if length < 8 + 3 * count or count == 0:
                raise FormatError(f"{name}: frame header lists {count} components in {length} bytes")
            factors = tuple(
                (data[pos + 9 + 3 * c] >> 4, data[pos + 9 + 3 * c] & 0x0F) for c in range(count)
            )
            if width == 0 or height == 0 or any(h == 0 or v == 0 for h, v in factors):
                raise FormatError(f"{name}: frame header gives size {width}x{height} or a zero sampling factor")
            frame = (marker, precision, width, height, count, factors, pos + 3)
        elif marker == _SOS:
            if frame is None:
                raise FormatError(f"{name}: scan before any frame header")
            scan_components = data[pos + 2] if length >= 3 else 0
            sof, precision, width, height, count, factors, height_offset = frame
            max_v = max(v for _h, v in factors)
            return JpegInfo(
                width=width,
                height=height,
                components=count,
                precision=precision,
                progressive=sof == 0xC2,
                truncatable=sof in _SEQUENTIAL_HUFFMAN and scan_components == count and precision == 8,
                mcu_height_px=8 * max_v,
                height_offset=height_offset,
                subsampling=factors,
            )
        pos += length


def with_frame_height(data: bytes | memoryview, info: JpegInfo, rows: int) -> bytearray:
    """A copy of ``data`` whose frame claims only ``rows`` rows (a multiple of the MCU height).

    libjpeg-turbo then decodes MCU rows until it has ``rows`` rows and treats the rest of the scan
    as trailing bytes, which it skips (a warning, not an error): the decode does no work for rows
    below the crop. Only valid when ``info.truncatable``.
    """
    if not info.truncatable:
        raise ValueError("frame height may only be shortened for single-scan sequential JPEGs")
    if not 0 < rows <= info.height:
        raise ValueError(f"rows must be in 1..{info.height}, got {rows}")
    start = info.height_offset
    out = bytearray(data)
    out[start] = rows >> 8
    out[start + 1] = rows & 0xFF
    return out
