"""The packed format: round trip, checksums, truncation, hostile headers, indexes and manifests."""

from __future__ import annotations

import io
import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from stave.data import PackedDataset, pack, verify
from stave.data import format as fmt
from stave.data.native import native_module
from stave.errors import FormatError, InputError


@pytest.fixture
def packed(image_folder: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "packed"
    pack(image_folder, dst, shard_bytes=1 << 16, workers=2)
    return dst


def test_round_trip_keeps_jpeg_pixels_labels_and_sizes(image_folder: Path, packed: Path) -> None:
    ds = PackedDataset(packed, output="bytes")
    sources = sorted((p for p in image_folder.rglob("*") if p.is_file()), key=lambda p: (p.parent.name, p.name))
    assert len(ds) == len(sources)
    assert ds.classes == ["cat", "dog"]
    assert ds.num_shards >= 2  # 64 KiB shards
    for i, src in enumerate(sources):
        data, label = ds[i]
        assert label == (0 if src.parent.name == "cat" else 1)
        from PIL import Image

        with Image.open(src) as im:
            assert (int(ds.widths[i]), int(ds.heights[i])) == im.size
        if src.suffix == ".jpg" and "cmyk" not in src.name:
            # Kept losslessly: restart-coded (when the native module is built), the same pixels.
            with Image.open(src) as original, Image.open(io.BytesIO(data)) as stored:
                assert np.array_equal(np.asarray(original.convert("RGB")), np.asarray(stored.convert("RGB")))
            assert (data == src.read_bytes()) == (native_module() is None)
        else:
            assert data[:2] == b"\xff\xd8"  # PNG and CMYK re-encoded as RGB JPEG
    pil, _ = PackedDataset(packed)[0]
    assert pil.mode == "RGB"
    tensor, _ = PackedDataset(packed, output="tensor")[0]
    assert tensor.shape[0] == 3 and str(tensor.dtype) == "torch.uint8"
    assert verify(packed).num_samples == len(ds)


def test_keep_bytes_stores_fitting_jpegs_byte_for_byte(image_folder: Path, tmp_path: Path) -> None:
    dst = tmp_path / "kept"
    pack(image_folder, dst, restart_markers=False, workers=1)
    ds = PackedDataset(dst, output="bytes")
    sources = sorted((p for p in image_folder.rglob("*") if p.is_file()), key=lambda p: (p.parent.name, p.name))
    kept = [i for i, src in enumerate(sources) if src.suffix == ".jpg" and "cmyk" not in src.name]
    assert kept
    for i in kept:
        assert ds[i][0] == sources[i].read_bytes()


def _shard(root: Path, number: int = 0) -> Path:
    return root / fmt.shard_name(number)


def test_flipped_byte_fails_its_checksum_naming_the_shard(packed: Path) -> None:
    shard = _shard(packed, 1)
    raw = bytearray(shard.read_bytes())
    raw[fmt.HEADER_BYTES + 100] ^= 0xFF
    shard.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match=r"shard-00001\.stave: sample \d+ checksum mismatch"):
        verify(packed)
    ds = PackedDataset(packed, verify=True)
    first_of_shard = int(ds._starts[1])
    with pytest.raises(FormatError, match="shard-00001"):
        ds[first_of_shard]


def test_truncated_shard_is_named(packed: Path) -> None:
    shard = _shard(packed, 0)
    shard.write_bytes(shard.read_bytes()[:-10])
    with pytest.raises(FormatError, match=r"shard-00000\.stave: truncated shard"):
        PackedDataset(packed)
    shard.write_bytes(b"STAVE")
    with pytest.raises(FormatError, match="truncated"):
        PackedDataset(packed)


def test_missing_manifest_says_the_pack_was_interrupted(packed: Path) -> None:
    (packed / fmt.MANIFEST_NAME).unlink()
    with pytest.raises(InputError, match="interrupted"):
        PackedDataset(packed)


def _rewrite_index(shard: Path, mutate) -> None:
    """Change index records and re-seal the index and header checksums (a well-formed hostile file)."""
    raw = bytearray(shard.read_bytes())
    header = fmt.parse_header(bytes(raw[: fmt.HEADER_BYTES]), len(raw), str(shard))
    index = np.frombuffer(bytes(raw[header.index_offset :]), dtype=fmt.RECORD_DTYPE).copy()
    mutate(index)
    new_index = index.tobytes()
    raw[header.index_offset :] = new_index
    sealed = fmt.ShardHeader(header.num_samples, header.data_offset, header.data_bytes, header.index_offset, zlib.crc32(new_index), header.shard_number)
    raw[: fmt.HEADER_BYTES] = fmt.pack_header(sealed)
    shard.write_bytes(bytes(raw))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda ix: ix["offset"].__setitem__(0, 1 << 40), "outside the data region"),
        (lambda ix: ix["size"].__setitem__(1, 0xFFFFFFFF), "outside the data region"),
        (lambda ix: ix["offset"].__setitem__(0, 3), "outside the data region"),
        (lambda ix: ix["encoding"].__setitem__(0, 9), "unknown encoding"),
        (lambda ix: ix["width"].__setitem__(0, 0), "impossible size"),
        (lambda ix: (ix["encoding"].__setitem__(0, fmt.ENC_RAW), ix["channels"].__setitem__(0, 3)), "does not match"),
    ],
)
def test_hostile_index_records_are_rejected(packed: Path, mutate, message: str) -> None:
    _rewrite_index(_shard(packed), mutate)
    with pytest.raises(FormatError, match=message):
        PackedDataset(packed)


def test_index_checksum_and_header_checks(packed: Path) -> None:
    shard = _shard(packed)
    raw = bytearray(shard.read_bytes())
    raw[-1] ^= 0x01  # inside the index, not re-sealed
    shard.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match="index checksum"):
        PackedDataset(packed)
    raw[0:8] = b"NOTSTAVE"
    shard.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match="bad magic"):
        PackedDataset(packed)
    raw[0:8] = fmt.MAGIC
    raw[20] ^= 0x01  # num_samples changed without fixing the header checksum
    shard.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match="header checksum"):
        PackedDataset(packed)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m["shards"][0].__setitem__("file", "../../etc/passwd.stave"), "not a plain shard file name"),
        (lambda m: m.__setitem__("num_samples", m["num_samples"] + 1), "does not match"),
        (lambda m: m.__setitem__("format", "ffcv"), "format"),
        (lambda m: m["shards"][0].__setitem__("bytes", m["shards"][0]["bytes"] + 5), "manifest says"),
        (lambda m: m["shards"][0].__setitem__("file", "shard-00099.stave"), "missing"),
    ],
)
def test_hostile_manifests_are_rejected(packed: Path, edit, message: str) -> None:
    path = packed / fmt.MANIFEST_NAME
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))
    with pytest.raises(FormatError, match=message):
        PackedDataset(packed)


def test_manifest_not_json_is_a_format_error(packed: Path) -> None:
    (packed / fmt.MANIFEST_NAME).write_bytes(b"\x00{not json")
    with pytest.raises(FormatError, match="not valid JSON"):
        PackedDataset(packed)


def test_out_of_range_index_and_shard_subset(indexed_pack: Path) -> None:
    ds = PackedDataset(indexed_pack, output="numpy")
    with pytest.raises(IndexError):
        ds[len(ds)]
    assert ds[-1][1] == len(ds) - 1
    part = PackedDataset(indexed_pack, shards=[1])
    assert 0 < len(part) < len(ds)
    assert part.labels[0] == ds._starts[1]  # labels are indexes: shard 1 starts where shard 0 ends
    with pytest.raises(InputError, match="no shard 7"):
        PackedDataset(indexed_pack, shards=[7])


def test_dataset_pickles_for_process_workers(indexed_pack: Path) -> None:
    import pickle

    import torch

    ds = PackedDataset(indexed_pack, output="tensor")
    ds[0]  # maps the shard
    clone = pickle.loads(pickle.dumps(ds))
    assert torch.equal(clone[3][0], ds[3][0])
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=1, collate_fn=lambda b: [label for _, label in b])
    assert [label for batch in loader for label in batch] == list(range(len(ds)))


def test_header_struct_layout_is_stable() -> None:
    header = fmt.ShardHeader(3, 64, 100, fmt.index_offset_for(100), 7, 2)
    raw = fmt.pack_header(header)
    assert len(raw) == fmt.HEADER_BYTES and raw[:8] == fmt.MAGIC
    assert struct.unpack_from("<Q", raw, 16)[0] == 3
    parsed = fmt.parse_header(raw, header.file_bytes, "x")
    assert parsed == header


def test_random_corruption_never_crashes(packed: Path) -> None:
    """Flip random bytes anywhere in a shard: opening and reading give a FormatError or good data, never a crash."""
    from stave.data.loader import ImageLoader

    shard = _shard(packed)
    pristine = shard.read_bytes()
    rng = np.random.default_rng(0)
    for trial in range(16):
        raw = bytearray(pristine)
        for pos in rng.integers(0, len(raw), size=int(rng.integers(1, 4))):
            raw[pos] = int(rng.integers(0, 256))
        shard.write_bytes(bytes(raw))
        try:
            ds = PackedDataset(packed, verify=trial % 2 == 0, output="numpy")
            for i in range(int(ds._starts[1])):
                ds[i]
            loader = ImageLoader(ds, batch_size=4, size=16, workers=1, train=True)
            for _ in loader:
                pass
        except FormatError:
            continue
    shard.write_bytes(pristine)
