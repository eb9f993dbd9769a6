"""Minor page faults: counted from /proc, and they grow when fresh memory is touched."""

from __future__ import annotations

import mmap

import pytest

from stave.monitor.page_faults import minor_faults, page_bytes


def test_touching_fresh_pages_counts_faults():
    before = minor_faults()
    if before is None:
        pytest.skip("/proc/self/stat is not readable here")
    pages = 256
    with mmap.mmap(-1, pages * page_bytes()) as region:  # anonymous memory: no page is mapped yet
        for i in range(pages):
            region[i * page_bytes()] = 1
        after = minor_faults()
    assert after is not None and after - before >= pages


def test_page_size_is_a_power_of_two():
    size = page_bytes()
    assert size >= 4096 and size & (size - 1) == 0
