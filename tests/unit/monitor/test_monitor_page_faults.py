"""Minor page faults: counted from /proc, and they grow when fresh memory is touched."""

from __future__ import annotations

import mmap

import pytest

from stave.monitor import procfs
from stave.monitor.procfs import minor_faults


def test_touching_fresh_pages_counts_faults():
    before = minor_faults()
    if before is None:
        pytest.skip("/proc/self/stat is not readable here")
    pages = 256
    with mmap.mmap(-1, pages * mmap.PAGESIZE) as region:  # anonymous memory: no page is mapped yet
        for i in range(pages):
            region[i * mmap.PAGESIZE] = 1
        after = minor_faults()
    assert after is not None and after - before >= pages


def test_minor_faults_survive_a_command_name_with_spaces_and_parentheses():
    fields = ["S", "1", "0", "0", "0", "0", "0", "4321"] + ["0"] * 10
    assert procfs.parse_pid_minor_faults("4242 (evil) (name x) " + " ".join(fields) + "\n") == 4321
