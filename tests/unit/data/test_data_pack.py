"""Packing: resume after an interruption, skipped and strict, options, list sources, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import IMAGES, IndexedImages
from stave.cli import main
from stave.data import PackedDataset, pack
from stave.data import format as fmt
from stave.data.native import native_module
from stave.data.writer import STATE_NAME
from stave.errors import InputError, OutputError


class Interrupt(Exception):
    """Stands in for Ctrl-C / a killed process in the middle of a pack."""


def _all_bytes(root: Path) -> list[bytes]:
    ds = PackedDataset(root, output="bytes")
    return [ds[i][0] for i in range(len(ds))]


def test_interrupted_pack_resumes_and_matches_an_uninterrupted_one(tmp_path: Path) -> None:
    data = IndexedImages(60)  # enough 2-3 KB samples that 64 KiB shards finish before the interruption
    reference = tmp_path / "reference"
    pack(data, reference, shard_bytes=1 << 16, workers=2)

    dst = tmp_path / "resumed"

    def stop_late(done: int, total: int) -> None:
        if done >= 50:
            raise Interrupt

    with pytest.raises(Interrupt):
        pack(data, dst, shard_bytes=1 << 16, workers=2, progress=stop_late)
    assert not (dst / fmt.MANIFEST_NAME).exists()
    assert (dst / STATE_NAME).exists()
    with pytest.raises(InputError, match="interrupted"):
        PackedDataset(dst)
    result = pack(data, dst, shard_bytes=1 << 16, workers=2)
    assert result.resumed_shards >= 1
    assert not (dst / STATE_NAME).exists() and not list(dst.glob("*.partial"))
    assert _all_bytes(dst) == _all_bytes(reference)
    assert list(PackedDataset(dst).labels) == list(range(60))


def test_rerun_with_other_options_starts_over(tmp_path: Path) -> None:
    data = IndexedImages(30)
    dst = tmp_path / "d"

    def stop(done: int, total: int) -> None:
        if done >= 25:
            raise Interrupt

    with pytest.raises(Interrupt):
        pack(data, dst, shard_bytes=1 << 16, progress=stop)
    result = pack(data, dst, shard_bytes=1 << 16, max_side=32)
    assert result.resumed_shards == 0
    ds = PackedDataset(dst)
    assert len(ds) == 30 and int(max(ds.widths.max(), ds.heights.max())) <= 32


def test_complete_dataset_needs_overwrite(indexed_pack: Path, tmp_path: Path) -> None:
    dst = tmp_path / "d"
    pack(IndexedImages(5), dst)
    with pytest.raises(OutputError, match="--overwrite"):
        pack(IndexedImages(5), dst)
    assert pack(IndexedImages(6), dst, overwrite=True).num_samples == 6
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="other files"):
        pack(IndexedImages(5), other)


def test_corrupt_images_are_skipped_and_listed_or_fail_with_strict(image_folder: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    good = (IMAGES / "chelsea_240x160.jpg").read_bytes()
    (src / "a" / "good.jpg").write_bytes(good)
    (src / "a" / "truncated.jpg").write_bytes(good[: len(good) // 3])
    (src / "a" / "noise.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 50)
    result = pack(src, tmp_path / "out")
    assert result.num_samples == 1
    names = sorted(Path(s["source"]).name for s in result.skipped)
    assert names == ["noise.png", "truncated.jpg"]
    manifest = json.loads((tmp_path / "out" / fmt.MANIFEST_NAME).read_text())
    assert len(manifest["skipped"]) == 2
    with pytest.raises(InputError, match="--strict"):
        pack(src, tmp_path / "strict", strict=True)


def test_max_side_raw_and_sources(tmp_path: Path) -> None:
    big = Image.open(IMAGES / "chelsea_240x160.jpg").resize((600, 400))
    items = [(big, 3), (np.asarray(big), 4), ((IMAGES / "coffee_96x64.png").read_bytes(), 5), (str(IMAGES / "camera_gray_128x128.jpg"), 6)]
    shrunk = pack(items, tmp_path / "small", max_side=100)
    ds = PackedDataset(shrunk.path, output="numpy")
    assert [max(ds[i][0].shape[:2]) for i in range(4)] == [100, 100, 96, 100]
    assert list(ds.labels) == [3, 4, 5, 6]
    raw = PackedDataset(pack(items, tmp_path / "raw", max_side=32, raw=True).path, output="numpy")
    assert raw.encodings.tolist() == [fmt.ENC_RAW] * 4
    assert raw[0][0].shape == (21, 32, 3) and raw[3][0].shape == (32, 32, 3)
    with pytest.raises(InputError, match="max_side"):
        pack(items, tmp_path / "bad", max_side=0)


def test_csv_and_jsonl_lists(tmp_path: Path) -> None:
    (tmp_path / "imgs").mkdir()
    for name in ("chelsea_240x160.jpg", "rocket_restart_160x107.jpg"):
        (tmp_path / "imgs" / name).write_bytes((IMAGES / name).read_bytes())
    (tmp_path / "list.csv").write_text("path,label\nimgs/chelsea_240x160.jpg,cat\nimgs/rocket_restart_160x107.jpg,rocket\n")
    ds = PackedDataset(pack(tmp_path / "list.csv", tmp_path / "csv").path)
    assert ds.classes == ["cat", "rocket"] and list(ds.labels) == [0, 1]
    (tmp_path / "list.jsonl").write_text('{"path": "imgs/rocket_restart_160x107.jpg", "label": 7}\n')
    ds = PackedDataset(pack(tmp_path / "list.jsonl", tmp_path / "jsonl").path)
    assert list(ds.labels) == [7]
    (tmp_path / "bad.jsonl").write_text("{oops\n")
    with pytest.raises(InputError, match=r"bad.jsonl:1: not JSON"):
        pack(tmp_path / "bad.jsonl", tmp_path / "x")


def test_cli_pack_verify_and_bad_input(image_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dst = tmp_path / "cli"
    assert main(["pack", str(image_folder), str(dst), "--shard-size", "64KiB"]) == 0
    out = capsys.readouterr().out
    assert "packed 10 images" in out
    if native_module() is not None:
        assert "JPEGs kept (same pixels)" in out and "restart-coded" in out
    else:
        assert "kept byte-for-byte" in out
    assert main(["pack", str(image_folder), str(tmp_path / "kept"), "--keep-bytes"]) == 0
    assert "kept byte-for-byte" in capsys.readouterr().out
    assert main(["pack", "--verify", str(dst)]) == 0
    assert "OK, 10 samples" in capsys.readouterr().out
    assert main(["pack", str(image_folder), str(dst)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["pack", str(tmp_path / "nope"), str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such file" in err
    shard = dst / fmt.shard_name(0)
    shard.write_bytes(shard.read_bytes()[:-3])
    assert main(["pack", "--verify", str(dst)]) == 2
    assert "truncated shard" in capsys.readouterr().err


def test_packed_with_reads_the_options_a_pack_was_made_with(tmp_path: Path) -> None:
    from stave.data.writer import packed_with

    dst = pack(IndexedImages(4), tmp_path / "p", max_side=64).path
    assert packed_with(dst, {"max_side": 64, "restart_markers": True})
    assert not packed_with(dst, {"max_side": None})
    assert not packed_with(tmp_path / "missing", {})
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / fmt.MANIFEST_NAME).write_text("[1, 2]")  # valid JSON, not a manifest
    assert not packed_with(tmp_path / "bad", {})
