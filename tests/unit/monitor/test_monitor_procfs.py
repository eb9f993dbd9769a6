"""The /proc parsers on fixed text, and the device selection for the disk read rate."""

from __future__ import annotations

import os
import sys

import pytest

from stave.monitor import procfs
from stave.monitor.procfs import ProcfsSource, ProcPaths
from stave.monitor.psutil_source import PsutilSource

STAT = """cpu  100 5 50 1000 20 3 2 7 9 0
cpu0 60 5 30 400 15 2 1 4 9 0
cpu1 40 0 20 600 5 1 1 3 0 0
intr 12345 0 0 1 2 3 4 5 6 7 8 9
ctxt 999
procs_running 3
procs_blocked 1
"""


def test_cpu_stat_sums_only_the_usable_cores() -> None:
    busy, iowait, total, running, steal = procfs.parse_cpu_stat(STAT, None)
    assert (busy, iowait, running, steal) == (100 + 5 + 50 + 3 + 2, 20, 3, 7)
    assert total == 100 + 5 + 50 + 1000 + 20 + 3 + 2 + 7  # guest (9) is already inside user
    busy1, iowait1, total1, _, steal1 = procfs.parse_cpu_stat(STAT, frozenset({1}))
    assert (busy1, iowait1, total1, steal1) == (40 + 20 + 1 + 1, 5, 40 + 20 + 600 + 5 + 1 + 1 + 3, 3)


def test_cpu_stat_without_matching_lines_is_an_error() -> None:
    with pytest.raises(ValueError):
        procfs.parse_cpu_stat("intr 1 2 3\n", None)
    with pytest.raises(ValueError):
        procfs.parse_cpu_stat(STAT, frozenset({7}))


def test_kv_table_matches_whole_keys_and_converts_kb() -> None:
    text = "MemTotal: 100 kB\nSwapCached:  7 kB\nCached:   5 kB\nMemAvailable: 10 kB\nnr_x 4\npswpin 12\n"
    out = procfs.parse_kv_table(text, ("Cached", "MemAvailable", "pswpin", "pswpout"))
    assert out == {"Cached": 5 * 1024, "MemAvailable": 10 * 1024, "pswpin": 12}


def test_diskstats_counts_named_devices_in_512_byte_sectors() -> None:
    text = (
        "   8       0 sda 10 0 100 0 0 0 0 0 0 0 0\n"
        "   8       1 sda1 10 0 100 0 0 0 0 0 0 0 0\n"
        "   7       0 loop0 1 0 999 0 0 0 0 0 0 0 0\n"
        " 259       0 nvme0n1 5 0 8 0 0 0 0 0 0 0 0\n"
    )
    assert procfs.parse_diskstats_read_bytes(text, frozenset({"sda", "nvme0n1"})) == (100 + 8) * 512


def test_pressure_reads_the_some_total() -> None:
    text = "some avg10=1.00 avg60=0.50 avg300=0.10 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n"
    assert procfs.parse_pressure_some_us(text) == 123456
    with pytest.raises(ValueError):
        procfs.parse_pressure_some_us("full avg10=0.00 total=7\n")


def test_pid_stat_survives_a_command_name_with_spaces_and_parentheses() -> None:
    fields = ["S", "1"] + ["0"] * 9 + ["700", "300"] + ["0"] * 4 + ["12", "0", "5555", "0", "2048"]
    text = "4242 (evil) (name x) " + " ".join(fields) + " 0 0\n"
    stat = procfs.parse_pid_stat(text)
    assert stat == procfs.PidStat(cpu_ticks=1000, threads=12, start_ticks=5555, rss_pages=2048)


def test_status_context_switches() -> None:
    text = "Name:\tpython\nvoluntary_ctxt_switches:\t17\nnonvoluntary_ctxt_switches:\t4\n"
    assert procfs.parse_status_ctx(text) == (17, 4)
    assert procfs.parse_status_ctx("Name:\tx\n") == (None, None)


def test_storage_devices_skip_stacked_loop_and_ram_devices(tmp_path) -> None:
    for name in ("sda", "nvme0n1", "dm-0", "loop3", "zram0"):
        (tmp_path / name / "slaves").mkdir(parents=True)
    (tmp_path / "dm-0" / "slaves" / "sda2").touch()
    assert procfs.storage_devices(str(tmp_path)) == frozenset({"sda", "nvme0n1"})
    assert procfs.storage_devices(str(tmp_path / "missing")) is None


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")


@linux_only
def test_procfs_source_reads_this_process_like_psutil() -> None:
    source = ProcfsSource(ProcPaths())
    try:
        mine = source.process(os.getpid(), with_ctx=True)
        machine = source.machine()
    finally:
        source.close()
    other = PsutilSource().process(os.getpid(), with_ctx=True)
    assert mine is not None and other is not None
    assert mine.ctx_voluntary is not None and mine.threads and mine.threads >= 1
    assert abs(mine.cpu_s - other.cpu_s) < 0.5
    assert mine.rss_bytes is not None and other.rss_bytes is not None
    assert abs(mine.rss_bytes - other.rss_bytes) < 0.2 * other.rss_bytes
    assert machine.cpu_total_s and machine.cpu_total_s > 0
    assert machine.mem_available_bytes and machine.mem_available_bytes > 0


@linux_only
def test_missing_files_make_their_counters_absent(tmp_path) -> None:
    source = ProcfsSource(ProcPaths(pressure=str(tmp_path / "no-pressure"), sys_block=str(tmp_path / "no-sys")))
    try:
        machine = source.machine()
        assert machine.psi_cpu_some_s is None and machine.psi_io_some_s is None
        assert machine.disk_read_bytes is None
        assert machine.cpu_busy_s is not None
        assert source.process(2**22 + 12345, with_ctx=True) is None  # above pid_max: never exists
    finally:
        source.close()
    empty = ProcfsSource(ProcPaths(proc=str(tmp_path)))
    assert empty.machine().cpu_total_s is None and empty.machine().mem_available_bytes is None
    empty.close()
