"""The run directory (layout, untrusted files) and the merge (rank status, launches, missing ranks)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from dist_factory import StepShape, record

from stave.dist import merge, rundir
from stave.doctor.facade import merged_result
from stave.errors import InputError, OutputError
from stave.files import atomic_write_json


def write(run_dir: Path, rec, mtime: float | None = None) -> Path:
    path = rundir.record_path(run_dir, rec.run.rank)
    atomic_write_json(path, rec.to_dict(), indent=None)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def test_records_round_trip_through_the_directory(tmp_path: Path) -> None:
    write(tmp_path, record(0))
    write(tmp_path, record(1, shapes=[StepShape(120, data=40, fwd=30, bwd=40, opt=10, comm=2)] * 8))
    scan = rundir.scan(tmp_path)
    assert [f.rank for f in scan.files] == [0, 1] and not scan.problems
    assert scan.files[1].record.steps[3].data_wait_ns == 40_000_000
    assert scan.files[1].record.dist.run_id == "run-a"


def test_hostile_and_broken_files_are_problems_not_crashes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = write(tmp_path, record(0))
    (tmp_path / "rank-00001.json").write_text('{"schema": "stave.record/1", "run": {"rank": "one"}}')
    (tmp_path / "rank-00002.json").write_bytes(b"\xff\xfe not json")
    (tmp_path / "rank-00003.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "rank-00004.json").write_text(json.dumps({"schema": "pickle/1"}))
    wrong = record(7)
    atomic_write_json(tmp_path / "rank-00005.json", wrong.to_dict(), indent=None)  # named for another rank
    big = tmp_path / "rank-00006.json"
    limit = good.stat().st_size + 100
    big.write_text(" " * (limit + 1))
    monkeypatch.setattr(rundir, "MAX_RECORD_BYTES", limit)
    scan = rundir.scan(tmp_path)
    assert [f.rank for f in scan.files] == [0]
    text = "\n".join(scan.problems)
    for rank in (1, 2, 3, 4, 6):
        assert f"rank {rank}: record unreadable" in text
    assert "rank-00005.json holds rank 7's record" in text


def test_scan_of_a_missing_directory_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="run directory not found"):
        rundir.scan(tmp_path / "nope")
    with pytest.raises(InputError, match="no rank records"):
        merge.collect_once(tmp_path)


def test_prepare_refuses_a_file_and_clear_removes_only_records(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputError, match="is a file"):
        rundir.prepare(tmp_path / "f")
    (tmp_path / "f").unlink()
    write(tmp_path, record(0))
    (tmp_path / "notes.txt").write_text("keep me")
    assert rundir.clear_records(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_status_from_the_record_the_pid_and_the_heartbeat(tmp_path: Path) -> None:
    now = time.time()
    final = rundir.RankFile(0, tmp_path, record(0, stopped_by="error"), now)
    assert merge.classify(final, now, "node0") == "crashed"
    running_here = rundir.RankFile(1, tmp_path, record(1, stopped_by="running", hostname="node0", pid=4242), now)
    assert merge.classify(running_here, now, "node0", pid_alive=lambda pid: True) == "running"
    assert merge.classify(running_here, now, "node0", pid_alive=lambda pid: False) == "killed"
    # Another host: only the record's rewrites tell; three missed intervals plus grace mean gone.
    remote = record(2, stopped_by="running", hostname="node1")
    remote.dist.record_interval_s = 10.0
    fresh = rundir.RankFile(2, tmp_path, remote, now - 20)
    stale = rundir.RankFile(2, tmp_path, remote, now - (3 * 10 + merge.STALE_GRACE_S + 1))
    assert merge.classify(fresh, now, "node0", pid_alive=lambda pid: False) == "running"
    assert merge.classify(stale, now, "node0", pid_alive=lambda pid: True) == "killed"


def test_collect_names_killed_and_missing_ranks(tmp_path: Path) -> None:
    write(tmp_path, record(0, world=3))
    write(tmp_path, record(2, world=3, stopped_by="running", hostname="node0", pid=99999999))
    got = merge.collect(tmp_path, hostname="node0", pid_alive=lambda pid: False)
    assert got.missing == [1] and got.statuses == ["ok", "killed"]
    assert got.records[1].run.stopped_by == "killed" and "final record" in (got.records[1].run.error or "")
    assert any("rank(s) 1 of 3 left no record" in n for n in got.notes)
    result = merged_result(got)
    assert [(r.rank, r.status) for r in result.ranks] == [(0, "ok"), (1, "missing"), (2, "killed")]
    failed = [f for f in result.findings if f.id == "RANK_FAILED"]
    assert failed and failed[0].rank == 2 and failed[0].evidence["missing_ranks"] == [1]


def test_collect_waits_for_a_rank_still_running(tmp_path: Path) -> None:
    write(tmp_path, record(0))
    write(tmp_path, record(1, stopped_by="running", hostname="node0", pid=1))
    t0 = time.monotonic()
    got = merge.collect(tmp_path, wait_s=1.2, hostname="node0", pid_alive=lambda pid: True)
    assert time.monotonic() - t0 >= 1.0
    assert got.statuses == ["ok", "running"] and any("still running" in n for n in got.notes)


def test_an_earlier_launch_in_the_same_directory_is_ignored(tmp_path: Path) -> None:
    write(tmp_path, record(0, run_id="old", started_at="2025-01-01T00:00:00+00:00"))
    write(tmp_path, record(1, run_id="old", started_at="2025-01-01T00:00:00+00:00"))
    write(tmp_path, record(0, run_id="new", started_at="2025-01-02T00:00:00+00:00"))
    # Same file name for rank 0: the newer launch overwrote it; rank 1's file is the old run's.
    got = merge.collect_once(tmp_path, hostname="node0")
    assert [r.dist.run_id for r in got.records] == ["new"] and got.missing == [1]
    assert any("earlier run" in n for n in got.notes)
