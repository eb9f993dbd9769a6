"""ImageLoader and DeviceLoader on CPU: order, epochs, DDP slices, resume, transforms, normalization."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import IMAGES, big_photo_jpeg

from stave.data import DeviceLoader, PackedDataset
from stave.data import ImageLoader as _ImageLoader
from stave.data.crop import random_resized_crop_boxes
from stave.data.order import OrderSpec, epoch_permutation, rank_indices
from stave.errors import UsageError

# These tests check the host path (buffers, normalization, order); on a machine with a GPU the
# loader's default device would be cuda. The cuda-marked tests pass device="cuda" themselves.
ImageLoader = functools.partial(_ImageLoader, device="cpu")


def labels_of(loader) -> list[int]:
    return [int(v) for _, labels in loader for v in labels]


def test_epoch_permutations_are_fresh_full_permutations() -> None:
    spec = OrderSpec(num_samples=101, batch_size=8, shuffle=True, drop_last=False, seed=3, rank=0, world_size=1)
    epochs = [rank_indices(spec, e) for e in range(4)]
    for order in epochs:
        assert sorted(order.tolist()) == list(range(101))
    assert len({tuple(o.tolist()) for o in epochs}) == 4
    assert np.array_equal(epoch_permutation(101, 3, 2), epochs[2])  # a pure function of (seed, epoch)


@pytest.mark.parametrize(("num_samples", "world_size"), [(100, 3), (53, 4), (8, 8)])
def test_ddp_slices_are_disjoint_and_equal(num_samples: int, world_size: int) -> None:
    specs = [OrderSpec(num_samples, 4, True, False, 0, r, world_size) for r in range(world_size)]
    for epoch in range(2):
        slices = [rank_indices(s, epoch) for s in specs]
        assert len({len(s) for s in slices}) == 1
        assert len({s.num_batches for s in specs}) == 1
        union = np.concatenate(slices)
        assert len(np.unique(union)) == len(union) == (num_samples // world_size) * world_size


def test_loader_reads_every_sample_once_per_epoch_and_reshuffles(indexed_pack: Path) -> None:
    loader = ImageLoader(indexed_pack, batch_size=8, size=32, workers=2, drop_last=False, seed=1)
    assert len(loader) == 7  # 53 samples
    first = labels_of(loader)
    second = labels_of(loader)  # the epoch advanced by itself
    assert sorted(first) == sorted(second) == list(range(53))
    assert first != second and loader.epoch == 2
    loader.set_epoch(0)
    assert labels_of(loader) == first


def test_loader_ranks_get_disjoint_equal_slices_with_equal_batch_counts(indexed_pack: Path) -> None:
    seen = []
    for rank in range(3):
        loader = ImageLoader(indexed_pack, batch_size=5, size=16, workers=1, rank=rank, world_size=3, seed=7)
        seen.append(labels_of(loader))
        assert len(loader) == 17 // 5
    assert len({len(s) for s in seen}) == 1
    flat = [v for s in seen for v in s]
    assert len(set(flat)) == len(flat)


def test_state_dict_resume_yields_exactly_the_remaining_batches(indexed_pack: Path) -> None:
    full = ImageLoader(indexed_pack, batch_size=6, size=24, workers=2, seed=5)
    full.set_epoch(3)
    reference = [(images.clone(), labels.clone()) for images, labels in full]

    interrupted = ImageLoader(indexed_pack, batch_size=6, size=24, workers=2, seed=5)
    interrupted.set_epoch(3)
    taken = []
    for step, batch in enumerate(interrupted):
        taken.append(batch)
        if step == 2:
            break
    state = interrupted.state_dict()
    assert state["batches_done"] == 3 and state["epoch"] == 3

    resumed = ImageLoader(indexed_pack, batch_size=6, size=24, workers=1, seed=5)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(taken) + len(rest) == len(reference)
    for (images, labels), (ref_images, ref_labels) in zip(rest, reference[3:]):
        assert torch.equal(labels, ref_labels)
        assert torch.equal(images, ref_images)  # same crops and flips: augmentation keyed by batch
    assert resumed.epoch == 4
    with pytest.raises(UsageError, match="batch_size"):
        ImageLoader(indexed_pack, batch_size=7, workers=1, seed=5).load_state_dict(state)


def test_train_batches_are_normalized_float_nchw(indexed_pack: Path) -> None:
    raw = ImageLoader(indexed_pack, batch_size=8, size=32, workers=1, mean=None, std=None, seed=2)
    norm = ImageLoader(indexed_pack, batch_size=8, size=32, workers=1, seed=2, channels_last=True)
    (u8, labels_u8), (f32, labels_f) = next(iter(raw)), next(iter(norm))
    assert u8.dtype == torch.uint8 and tuple(u8.shape) == (8, 3, 32, 32)
    assert f32.dtype == torch.float32 and f32.is_contiguous(memory_format=torch.channels_last)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    assert torch.equal(labels_u8, labels_f)
    assert torch.allclose(f32, (u8.float() / 255 - mean) / std, atol=1e-5)


def test_eval_path_is_ordered_center_crops(indexed_pack: Path) -> None:
    loader = ImageLoader(indexed_pack, batch_size=10, train=False, size=20, workers=2, mean=None, std=None)
    assert labels_of(loader) == list(range(53))
    images, _ = next(iter(loader))
    ds = PackedDataset(indexed_pack, output="numpy")
    pixels = ds[0][0]
    h, w = pixels.shape[:2]
    side = min(h, w) * 0.875
    y, x = (h - side) / 2, (w - side) / 2
    from PIL import Image

    expected = np.asarray(Image.fromarray(pixels).resize((20, 20), Image.Resampling.BILINEAR, box=(x, y, x + side, y + side)))
    got = images[0].permute(1, 2, 0).numpy().astype(int)
    assert np.abs(got - expected.astype(int)).mean() < 6  # box rounded to whole pixels


def test_transforms_run_where_documented(indexed_pack: Path) -> None:
    calls = []

    def invert(image: np.ndarray) -> np.ndarray:
        calls.append(image.shape)
        return 255 - image

    def zero_labels(images: torch.Tensor, labels: torch.Tensor):
        return images * 0 + 1, labels * 0

    plain = ImageLoader(indexed_pack, batch_size=4, size=16, workers=1, mean=None, std=None, seed=9, train=False)
    inverted = ImageLoader(indexed_pack, batch_size=4, size=16, workers=1, mean=None, std=None, seed=9, train=False, transform=invert)
    a, b = next(iter(plain))[0], next(iter(inverted))[0]
    assert torch.equal(255 - a, b) and calls[0] == (16, 16, 3)
    mixed = ImageLoader(indexed_pack, batch_size=4, size=16, workers=1, batch_transform=zero_labels)
    images, labels = next(iter(mixed))
    assert torch.all(images == 1) and torch.all(labels == 0)
    bad = ImageLoader(indexed_pack, batch_size=4, size=16, workers=1, transform=lambda im: im[:8])
    with pytest.raises(UsageError, match="16x16x3 uint8"):
        next(iter(bad))


def test_raw_dataset_through_the_loader(tmp_path: Path) -> None:
    from stave.data import pack

    rng = np.random.default_rng(0)
    items = [(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8), i) for i in range(20)]
    root = pack(items, tmp_path / "raw", raw=True).path
    loader = ImageLoader(root, batch_size=5, train=False, size=32, resize=32, workers=1, mean=None, std=None)
    images, labels = next(iter(loader))
    for k in range(5):
        assert np.array_equal(images[k].permute(1, 2, 0).numpy(), items[int(labels[k])][0])  # stored pixels, untouched


def test_workers_auto_picks_a_count(indexed_pack: Path) -> None:
    loader = ImageLoader(indexed_pack, batch_size=8, size=16, workers="auto")
    assert 1 <= loader.workers <= max(1, torch.get_num_threads(), 2)
    with pytest.raises(UsageError):
        ImageLoader(indexed_pack, batch_size=8, workers="many")


def test_crop_boxes_stay_inside_and_cover_the_scale_range() -> None:
    rng = np.random.default_rng(0)
    widths = rng.integers(20, 800, 2000)
    heights = rng.integers(20, 800, 2000)
    boxes = random_resized_crop_boxes(widths, heights, rng)
    x, y, w, h = boxes.T
    assert (x >= 0).all() and (y >= 0).all() and (w > 0).all() and (h > 0).all()
    assert (x + w <= widths).all() and (y + h <= heights).all()
    share = w * h / (widths * heights)
    assert share.min() < 0.15 and share.max() > 0.9


def test_device_loader_wraps_a_plain_dataloader_on_cpu() -> None:
    images = torch.randint(0, 256, (10, 3, 8, 8), dtype=torch.uint8)
    labels = torch.arange(10)
    data = torch.utils.data.TensorDataset(images, labels)
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    wrapped = DeviceLoader(loader, "cpu", mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25), dtype=torch.bfloat16)
    batches = list(wrapped)
    assert len(batches) == len(wrapped) == 3
    out = torch.cat([b[0] for b in batches]).float()
    assert batches[0][0].dtype == torch.bfloat16
    assert torch.allclose(out, (images.float() / 255 - 0.5) / 0.25, atol=0.05)
    assert torch.equal(torch.cat([b[1] for b in batches]), labels)
    dicts = list(DeviceLoader([{"image": images[:2], "label": labels[:2]}], "cpu", mean=(0,) * 3, std=(1,) * 3))
    assert dicts[0]["image"].dtype == torch.float32 and torch.equal(dicts[0]["label"], labels[:2])
    with pytest.raises(UsageError, match="channels"):
        list(DeviceLoader([images[:, :2]], "cpu", mean=(0,) * 3, std=(1,) * 3))
    assert list(DeviceLoader([], "cpu")) == []


@pytest.mark.cuda
def test_device_loader_on_cuda_copies_pinned_batches_on_a_side_stream() -> None:
    images = torch.randint(0, 256, (6, 3, 8, 8), dtype=torch.uint8).pin_memory()
    wrapped = DeviceLoader([(images, torch.arange(6))] * 3, "cuda", mean=(0.5,) * 3, std=(0.5,) * 3, channels_last=True)
    for out, labels in wrapped:
        assert out.is_cuda and out.dtype == torch.float32 and out.is_contiguous(memory_format=torch.channels_last)
        assert torch.allclose(out.cpu(), (images.float() / 255 - 0.5) / 0.5, atol=1e-5)
        assert labels.is_cuda


@pytest.mark.cuda
def test_image_loader_on_cuda_pins_and_normalizes_on_device(indexed_pack: Path) -> None:
    loader = ImageLoader(indexed_pack, batch_size=8, size=32, workers=2, device="cuda", dtype=torch.float16)
    images, labels = next(iter(loader))
    assert images.is_cuda and images.dtype == torch.float16 and labels.is_cuda
    assert loader._slots[0].is_pinned()


@pytest.mark.cuda
def test_gpu_batch_decode_matches_cpu_decode() -> None:
    from stave.data.gpu import decode_jpeg_batch

    data = [(IMAGES / "chelsea_240x160.jpg").read_bytes(), (IMAGES / "rocket_restart_160x107.jpg").read_bytes()]
    decoded = decode_jpeg_batch(data, "cuda")
    assert [tuple(t.shape) for t in decoded] == [(3, 160, 240), (3, 107, 160)]
    assert all(t.is_cuda for t in decoded)


def test_cpu_batches_reuse_buffers_but_never_one_the_caller_still_holds(indexed_pack: Path) -> None:
    loader = ImageLoader(indexed_pack, batch_size=4, size=16, workers=2, seed=4, mean=None, std=None)
    kept = [(images, labels) for images, labels in loader]  # holds every batch: none may be overwritten
    reference = ImageLoader(indexed_pack, batch_size=4, size=16, workers=1, seed=4, mean=None, std=None)
    for (images, labels), (ref_images, ref_labels) in zip(kept, [(i.clone(), l.clone()) for i, l in reference]):
        assert torch.equal(labels, ref_labels) and torch.equal(images, ref_images)
    assert loader.buffers_allocated == len(kept)
    steady = ImageLoader(indexed_pack, batch_size=4, size=16, workers=2, seed=4)
    for _ in range(3):
        for _images, _labels in steady:
            pass
    # A training loop reuses the ring across epochs too (slots keep rotating at an epoch boundary,
    # where the loop variable still holds the last batch): no buffer beyond the ring is ever made.
    assert steady.buffers_allocated == steady.prefetch_batches + 2


def test_float_without_normalization_is_a_plain_cast(indexed_pack: Path) -> None:
    raw = ImageLoader(indexed_pack, batch_size=4, size=16, workers=1, mean=None, std=None, seed=1)
    cast = ImageLoader(indexed_pack, batch_size=4, size=16, workers=1, mean=None, std=None, seed=1, dtype=torch.float32)
    (a, _), (b, _) = next(iter(raw)), next(iter(cast))
    assert b.dtype == torch.float32 and torch.equal(a.float(), b)


def test_cpu_batches_equal_the_crop_decode_of_their_boxes(indexed_pack: Path) -> None:
    from stave.data.decode import CropBox, decode_encoded_crop, get_backend

    loader = ImageLoader(indexed_pack, batch_size=16, size=24, workers=2, mean=None, std=None, seed=11)
    images, labels = next(iter(loader))
    indices = labels.numpy()  # the indexed pack's label is the sample index
    boxes, flips = loader._boxes(indices, 0, 0)
    assert flips.any() and not flips.all()
    for row, index in enumerate(indices):
        expected, _ = decode_encoded_crop(
            loader.dataset.sample_bytes(int(index)), CropBox(*map(float, boxes[row])), 24, 24, get_backend(), flip=bool(flips[row])
        )
        assert torch.equal(images[row], expected.permute(2, 0, 1))


def test_per_sample_decode_allocates_no_image_sized_arrays(tmp_path: Path) -> None:
    import tracemalloc

    from stave.data import pack

    root = pack([(big_photo_jpeg(320 + 16 * i, 240), i) for i in range(4)], tmp_path / "big").path
    loader = ImageLoader(root, batch_size=4, size=64, workers=1, seed=3)
    out = torch.empty((4, 3, 64, 64))
    boxes, flips = loader._boxes(np.arange(4), 0, 0)
    boxes[:, :] = (10, 10, 300, 220)  # a large crop: a full decode of 232 rows, 200 KB of RGB
    loader.decode_into(out[0], 3, boxes[3], True)  # warm-up: the thread's scratch grows once
    tracemalloc.start()
    try:
        for i in range(4):
            loader.decode_into(out[i], i, boxes[i], bool(i % 2))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 48 * 1024, f"{peak} bytes allocated while decoding: an intermediate escaped the scratch buffers"


def test_native_and_binding_paths_give_bit_identical_batches(indexed_pack: Path, image_folder: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from stave.data import pack
    from stave.data.native import NATIVE_ENV, native_available

    if not native_available():
        pytest.skip("stave._jpeg_region is not built here")
    # The region decode is exact inside the crop box and the resize reads only the box; the fused
    # normalize rounds as torch's cast, mul_ and sub_ do: the batches must not differ by a bit.
    mixed = pack(image_folder, tmp_path / "mixed").path  # gray, progressive, 4:4:4, restart markers, CMYK, PNG
    for root, size in ((indexed_pack, 24), (mixed, 40)):
        for options in ({}, {"mean": None, "std": None}, {"train": False}):
            monkeypatch.delenv(NATIVE_ENV, raising=False)
            loader = ImageLoader(root, batch_size=4, size=size, workers=2, seed=9, **options)
            native = [(im.clone(), lab.clone()) for im, lab in loader]
            monkeypatch.setenv(NATIVE_ENV, "0")
            loader = ImageLoader(root, batch_size=4, size=size, workers=2, seed=9, **options)
            plain = [(im.clone(), lab.clone()) for im, lab in loader]
            assert len(native) == len(plain) > 0
            for (a, la), (b, lb) in zip(native, plain):
                assert torch.equal(la, lb) and torch.equal(a, b), (root.name, options)
    # Restart-coded (the default) and byte-for-byte packs hold the same coefficients: same batches.
    monkeypatch.delenv(NATIVE_ENV, raising=False)
    kept = pack(image_folder, tmp_path / "kept", restart_markers=False).path
    coded_batches = list(ImageLoader(mixed, batch_size=4, size=40, workers=2, seed=3))
    kept_batches = list(ImageLoader(kept, batch_size=4, size=40, workers=2, seed=3))
    assert len(coded_batches) == len(kept_batches) > 0
    for (a, la), (b, lb) in zip(coded_batches, kept_batches):
        assert torch.equal(la, lb) and torch.equal(a, b)
