"""Input pipelines: endless sampling, the worker gate, and the loss check's deterministic batches."""

from __future__ import annotations

import itertools
import threading

import torch
from torch.utils.data import Dataset
from torchvision import transforms

import tiny_job
from stave.bench.pipeline import GatedDataset, InfiniteSampler, Pipeline, check_batches
from stave.bench.settings import RunConfig
from stave.bench.spec import JobSpec


def test_infinite_sampler_yields_a_fresh_permutation_per_pass() -> None:
    first = list(itertools.islice(iter(InfiniteSampler(5, seed=3)), 15))
    for k in range(3):
        assert sorted(first[5 * k : 5 * k + 5]) == list(range(5))
    assert first[:5] != first[5:10] or first[5:10] != first[10:15]


def test_gate_blocks_reads_until_opened() -> None:
    gate = threading.Event()
    data = GatedDataset([10, 11, 12], gate)
    got: list[int] = []
    reader = threading.Thread(target=lambda: got.append(data[1]))
    reader.start()
    reader.join(timeout=0.2)
    assert got == [] and reader.is_alive()
    gate.set()
    reader.join(timeout=5)
    assert got == [11]


def test_pipeline_with_workers_pauses_and_resumes() -> None:
    spec = tiny_job.spec(batch_size=16)
    pipeline = Pipeline(spec, RunConfig(16, num_workers=1), torch.device("cpu"), seed=0, channels_last=False)
    try:
        x, y = pipeline.next()
        pipeline.pause()
        pipeline.resume()
        x2, _ = pipeline.next()
        assert x.shape == x2.shape == (16, 3, 16, 16) and y.shape == (16,)
    finally:
        pipeline.close()


def test_uint8_pipeline_normalizes_on_the_device_like_the_float_one() -> None:
    spec = tiny_job.spec(batch_size=8)
    floats = check_batches(spec, RunConfig(8), torch.device("cpu"), False, 8, 2)
    uint8 = check_batches(spec, RunConfig(8, uint8=True), torch.device("cpu"), True, 8, 2)
    for (xf, yf), (xu, yu) in zip(floats, uint8):
        assert torch.equal(yf, yu)
        assert xu.is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(xu, xf, atol=1e-5, rtol=1e-5)


class Crops(Dataset):
    """Random crops of one image: the same index must give the same crop in both variants."""

    def __init__(self, uint8: bool) -> None:
        pixels = torch.randint(0, 256, (3, 40, 40), dtype=torch.uint8, generator=torch.Generator().manual_seed(7))
        self.image = transforms.functional.to_pil_image(pixels)
        tail = [transforms.PILToTensor()] if uint8 else [transforms.ToTensor()]
        self.transform = transforms.Compose([transforms.RandomResizedCrop(16), *tail])

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int):
        return self.transform(self.image), index % 3


def test_check_batches_draw_the_same_random_crops_for_both_variants() -> None:
    spec = JobSpec(
        "crops",
        tiny_job.model,
        Crops(False),
        torch.nn.CrossEntropyLoss(),
        tiny_job.optimizer,
        8,
        uint8_dataset=Crops(True),
        mean=(0.0, 0.0, 0.0),
        std=(1.0, 1.0, 1.0),
    )
    a = check_batches(spec, RunConfig(8), torch.device("cpu"), False, 8, 2)
    b = check_batches(spec, RunConfig(8, uint8=True), torch.device("cpu"), False, 8, 2)
    again = check_batches(spec, RunConfig(8), torch.device("cpu"), False, 8, 2)
    for (xa, _), (xb, _), (xc, _) in zip(a, b, again):
        torch.testing.assert_close(xa, xb, atol=1e-5, rtol=1e-5)
        assert torch.equal(xa, xc)
