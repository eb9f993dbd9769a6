"""The benchmark's ImageNet-like JPEG generator."""

from __future__ import annotations

from pathlib import Path

import pytest

from stave.data.jpeg import read_jpeg_info
from stave.errors import InputError, OutputError


def test_make_image_folder_writes_real_looking_jpegs(tmp_path: Path) -> None:
    pytest.importorskip("skimage", reason="the generator cuts scikit-image's sample photographs (pip install 'stave[bench]')")
    from stave.data.synth import make_image_folder

    root = make_image_folder(tmp_path / "imgs", num_images=12, num_classes=3, seed=1, long_side=160)
    files = sorted(root.rglob("*.jpg"))
    assert len(files) == 12 and sorted(p.name for p in root.iterdir()) == ["class_000", "class_001", "class_002"]
    for f in files:
        info = read_jpeg_info(f.read_bytes())
        assert max(info.width, info.height) == 160 and not info.progressive
    # Photographs compress far better than noise would at quality 90 (noise: ~2 bytes/pixel).
    sizes = [f.stat().st_size / (read_jpeg_info(f.read_bytes()).width * read_jpeg_info(f.read_bytes()).height) for f in files]
    assert max(sizes) < 1.0
    again = make_image_folder(tmp_path / "again", num_images=12, num_classes=3, seed=1, long_side=160)
    assert [f.read_bytes() for f in sorted(again.rglob("*.jpg"))] == [f.read_bytes() for f in files]
    with pytest.raises(OutputError):
        make_image_folder(root, 2, 1)
    with pytest.raises(InputError):
        make_image_folder(tmp_path / "x", 0, 1)
