"""stave's packed dataset format: constants, the shard header and index, and their validation.

docs/format.md is the specification; this module is its executable form. A dataset is a directory
with ``manifest.json`` (written last: its presence means the pack finished) and shard files
``shard-NNNNN.stave``, each ``[64-byte header][sample bytes][index: one 40-byte record per
sample]``. Shards come from other people, so nothing here trusts them: every size and offset is
checked against the file before use, and a failure raises :class:`~stave.errors.FormatError`
naming the shard and what is wrong.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np

from stave.errors import FormatError

MAGIC = b"STAVESHD"
FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "stave.packed"
SHARD_SUFFIX = ".stave"
HEADER_BYTES = 64
RECORD_BYTES = 40
# The index starts on an 8-byte boundary so its 64-bit fields are naturally aligned when mapped.
INDEX_ALIGN_BYTES = 8

# Sample encodings (the ``encoding`` field of an index record).
ENC_JPEG = 1
ENC_RAW = 2
ENCODING_NAMES = {ENC_JPEG: "jpeg", ENC_RAW: "raw"}

# JPEG frame sizes are 16-bit; raw images are bounded by the same side so the two agree.
MAX_SIDE_PX = 65535

# magic, version, header size, record size, num_samples, data_offset, data_bytes, index_offset,
# index crc32, shard number, reserved; then the crc32 of the 60 bytes before it.
_HEADER = struct.Struct("<8sHHIQQQQIII")
assert _HEADER.size == HEADER_BYTES - 4

RECORD_DTYPE = np.dtype(
    [
        ("offset", "<u8"),
        ("size", "<u4"),
        ("crc32", "<u4"),
        ("label", "<i8"),
        ("width", "<u4"),
        ("height", "<u4"),
        ("encoding", "u1"),
        ("channels", "u1"),
        ("reserved", "V6"),
    ]
)
assert RECORD_DTYPE.itemsize == RECORD_BYTES


@dataclass(frozen=True)
class ShardHeader:
    """The fixed-size header at the start of every shard file."""

    num_samples: int
    data_offset: int
    data_bytes: int
    index_offset: int
    index_crc32: int
    shard_number: int

    @property
    def file_bytes(self) -> int:
        """The exact size the shard file must have."""
        return self.index_offset + self.num_samples * RECORD_BYTES


def shard_name(number: int) -> str:
    """File name of shard ``number`` (``shard-00000.stave``)."""
    return f"shard-{number:05d}{SHARD_SUFFIX}"


def index_offset_for(data_bytes: int) -> int:
    """Where the index starts for a shard with ``data_bytes`` of samples (aligned)."""
    end = HEADER_BYTES + data_bytes
    return (end + INDEX_ALIGN_BYTES - 1) // INDEX_ALIGN_BYTES * INDEX_ALIGN_BYTES


def pack_header(header: ShardHeader) -> bytes:
    """Serialize a header (with its trailing crc32)."""
    body = _HEADER.pack(
        MAGIC,
        FORMAT_VERSION,
        HEADER_BYTES,
        RECORD_BYTES,
        header.num_samples,
        header.data_offset,
        header.data_bytes,
        header.index_offset,
        header.index_crc32,
        header.shard_number,
        0,
    )
    return body + struct.pack("<I", zlib.crc32(body))


def parse_header(raw: bytes | memoryview, file_bytes: int, name: str) -> ShardHeader:
    """Parse and check a shard header against the real file size ``file_bytes``.

    A shard shorter than its header promises gets a message that says it is truncated.
    """
    if file_bytes < HEADER_BYTES or len(raw) < HEADER_BYTES:
        raise FormatError(f"{name}: truncated shard ({file_bytes} bytes; the header alone is {HEADER_BYTES})")
    body = bytes(raw[: HEADER_BYTES - 4])
    (stored_crc,) = struct.unpack("<I", bytes(raw[HEADER_BYTES - 4 : HEADER_BYTES]))
    magic, version, header_bytes, record_bytes, count, data_offset, data_bytes, index_offset, index_crc, number, _ = (
        _HEADER.unpack(body)
    )
    if magic != MAGIC:
        raise FormatError(f"{name}: not a stave shard (bad magic {magic!r})")
    if zlib.crc32(body) != stored_crc:
        raise FormatError(f"{name}: header checksum mismatch (the shard is corrupt)")
    if version != FORMAT_VERSION:
        raise FormatError(f"{name}: format version {version}, this stave reads version {FORMAT_VERSION}; upgrade stave")
    if header_bytes != HEADER_BYTES or record_bytes != RECORD_BYTES:
        raise FormatError(f"{name}: header/record sizes {header_bytes}/{record_bytes}, expected {HEADER_BYTES}/{RECORD_BYTES}")
    if data_offset != HEADER_BYTES or index_offset != index_offset_for(data_bytes):
        raise FormatError(f"{name}: inconsistent layout (data at {data_offset}, {data_bytes} bytes, index at {index_offset})")
    header = ShardHeader(count, data_offset, data_bytes, index_offset, index_crc, number)
    # count * RECORD_BYTES cannot overflow in Python; compare with the real size before any read.
    if header.file_bytes > file_bytes:
        raise FormatError(
            f"{name}: truncated shard ({file_bytes} bytes, its header promises {header.file_bytes}); "
            "re-copy it or re-run `stave pack`"
        )
    if header.file_bytes < file_bytes:
        raise FormatError(f"{name}: {file_bytes - header.file_bytes} unexpected bytes after the index")
    return header


def check_index(index: np.ndarray, header: ShardHeader, name: str) -> None:
    """Check every record of a shard's index against its header (vectorized; hostile input)."""
    if len(index) == 0:
        return
    data_end = header.data_offset + header.data_bytes
    offsets = index["offset"]
    sizes = index["size"].astype(np.uint64)
    bad = (
        (offsets < header.data_offset)
        | (offsets > data_end)
        | (sizes == 0)
        | (sizes > data_end - np.minimum(offsets, data_end))
    )
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise FormatError(
            f"{name}: sample {i} points outside the data region "
            f"(offset {int(offsets[i])}, size {int(sizes[i])}, data is bytes {header.data_offset}..{data_end})"
        )
    enc = index["encoding"]
    bad_enc = ~np.isin(enc, list(ENCODING_NAMES))
    if bad_enc.any():
        i = int(np.flatnonzero(bad_enc)[0])
        raise FormatError(f"{name}: sample {i} has unknown encoding {int(enc[i])}")
    width = index["width"]
    height = index["height"]
    bad_dims = (width == 0) | (height == 0) | (width > MAX_SIDE_PX) | (height > MAX_SIDE_PX)
    if bad_dims.any():
        i = int(np.flatnonzero(bad_dims)[0])
        raise FormatError(f"{name}: sample {i} has impossible size {int(width[i])}x{int(height[i])}")
    raw = enc == ENC_RAW
    if raw.any():
        channels = index["channels"][raw].astype(np.uint64)
        expected = width[raw].astype(np.uint64) * height[raw].astype(np.uint64) * channels
        bad_raw = ~np.isin(channels, [1, 3]) | (expected != sizes[raw])
        if bad_raw.any():
            i = int(np.flatnonzero(raw)[np.flatnonzero(bad_raw)[0]])
            raise FormatError(
                f"{name}: raw sample {i} is {int(sizes[i])} bytes, which does not match "
                f"{int(width[i])}x{int(height[i])}x{int(index['channels'][i])}"
            )


def sample_crc32(data: bytes | memoryview) -> int:
    """The checksum stored per sample (CRC-32, as zlib computes it)."""
    return zlib.crc32(data)
