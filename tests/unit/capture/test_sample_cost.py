"""The one-thread sample cost probe (stave.capture.sample_cost)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from stave.capture import sample_cost


class Matmuls(Dataset):
    """Samples whose transform is torch work large enough for the intra-op pool to split."""

    def __init__(self) -> None:
        self.a = torch.randn(384, 384)

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        out = self.a
        for _ in range(6):
            out = out @ self.a
        return out[0] + torch.rand(1)


class PurePython(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> int:
        return sum(j * j for j in range(20000)) + random.randint(0, 9)


class Broken(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> int:
        if i == 2:
            raise KeyError("missing row")
        return i


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_pool_work_shows_as_extra_cpu_on_one_thread_and_python_does_not(two_threads) -> None:
    torch_ratio = sample_cost.one_thread_cpu_ratio(Matmuls())
    python_ratio = sample_cost.one_thread_cpu_ratio(PurePython())
    assert torch_ratio is not None and python_ratio is not None
    # One thread does the whole of each matmul; among two the main thread does about half.
    assert torch_ratio > 1.2
    assert python_ratio < torch_ratio
    assert torch.get_num_threads() == 2  # restored


def test_the_script_random_stream_and_threads_are_unchanged(two_threads) -> None:
    matmuls, broken = Matmuls(), Broken()  # built before the seeds: their own draws are not the probe's
    torch.manual_seed(1)
    np.random.seed(2)
    random.seed(3)
    expected = (torch.rand(2).tolist(), np.random.rand(), random.random())
    torch.manual_seed(1)
    np.random.seed(2)
    random.seed(3)
    sample_cost.one_thread_cpu_ratio(matmuls)
    sample_cost.one_thread_cpu_ratio(broken)
    assert (torch.rand(2).tolist(), np.random.rand(), random.random()) == expected
    assert torch.get_num_threads() == 2


def test_no_ratio_at_one_thread_for_failing_lengthless_or_cheap_datasets(two_threads) -> None:
    assert sample_cost.one_thread_cpu_ratio(Broken()) is None
    assert sample_cost.one_thread_cpu_ratio(iter(range(3))) is None
    assert sample_cost.one_thread_cpu_ratio(list(range(8))) is None  # far below MIN_PASS_CPU_S
    torch.set_num_threads(1)
    assert sample_cost.one_thread_cpu_ratio(Matmuls()) is None
