"""The streaming reader: same events whatever the layout, exact cuts, clear errors on bad files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from stave.errors import FormatError, InputError
from stave.trace import reader as reader_mod
from stave.trace.reader import TraceReader
from stave.trace.tables import load_trace
from stave.trace.times import event_times_ns
from trace_synth import kernel, op, step, write_trace

TRICKY = [
    step(1, 0, 100),
    # Names that contain the byte patterns the fast path cuts at, and non-ASCII text.
    op('weird "},{" name', 1, 2),
    op("nested }, { and ] , [", 3, 4, shapes=[[1, 2], [3]], note="x}, {y"),
    op("ünïcødé ✓ op", 5, 1.5),
    kernel("k<float>(int)", 10.25, 3.5, corr=7),
    {"ph": "M", "name": "thread_name", "pid": 100, "tid": 100, "args": {"name": "main"}},
    {"ph": "X", "cat": "cpu_op", "name": "no duration", "pid": 100, "tid": 100, "ts": 9},
]


def read_all(path: Path) -> tuple[list, TraceReader]:
    r = TraceReader(path)
    events = [e for chunk in r.chunks() for e in chunk]
    return events, r


@pytest.mark.parametrize("fmt", ["pretty", "min", "gz", "array"])
def test_same_events_in_every_layout(tmp_path: Path, fmt: str) -> None:
    path = write_trace(tmp_path / f"t.{fmt}.json", TRICKY, fmt=fmt, metadata={"distributedInfo": {"rank": 3}})
    events, r = read_all(path)
    assert [e.name for e in events] == [e["name"] for e in TRICKY]
    # The literal's exact time (its text, or whole ns where the C time reader is built).
    assert event_times_ns([events[4]])[0].tolist() == [10250] and events[4].args.correlation == 7
    assert events[6].dur is None
    if fmt != "array":
        assert r.stats.metadata["distributedInfo"] == {"rank": 3}
        assert r.stats.metadata["traceName"].endswith(".json")  # a key after traceEvents
    assert r.stats.compressed == (fmt == "gz")


@pytest.mark.parametrize("chunk", [16, 57, 300])
def test_tiny_chunks_cut_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    # With pieces smaller than one event, every cut candidate inside a string or nested value is
    # tried and must be rejected; the result must still be the exact event list.
    monkeypatch.setattr(reader_mod, "CHUNK_BYTES", chunk)
    many = TRICKY * 20
    for fmt in ("pretty", "min"):
        path = write_trace(tmp_path / f"t{fmt}.json", many, fmt=fmt)
        events, _ = read_all(path)
        assert [e.name for e in events] == [e["name"] for e in many]


def test_wrong_field_types_are_dropped_not_fatal(tmp_path: Path) -> None:
    events = [step(1, 0, 10), {"ph": "X", "cat": "cpu_op", "name": "bad", "pid": 1, "tid": 1, "ts": "soon",
                               "dur": [1], "args": {"correlation": "x", "External id": True}}]
    got, r = read_all(write_trace(tmp_path / "t.json", events))
    # A time that is not a number reaches the tables as written and is dropped there.
    assert got[1].name == "bad" and got[1].args.correlation is None
    data = load_trace(tmp_path / "t.json")
    assert data.skipped_no_time == 1


def _offset_error(path: Path) -> str:
    with pytest.raises(FormatError) as info:
        load_trace(path)
    msg = str(info.value)
    assert str(path) in msg and "\n" not in msg
    return msg


def test_truncated_plain_file_names_byte(tmp_path: Path) -> None:
    full = write_trace(tmp_path / "full.json", TRICKY * 5).read_bytes()
    path = tmp_path / "cut.json"
    path.write_bytes(full[: len(full) * 2 // 3])
    msg = _offset_error(path)
    assert "truncated" in msg and "byte" in msg


def test_truncated_gzip(tmp_path: Path) -> None:
    data = gzip.compress(json.dumps({"traceEvents": TRICKY * 50}).encode())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    msg = _offset_error(path)
    assert "gzip" in msg


def test_malformed_event_in_the_middle_gives_offset_and_event(tmp_path: Path) -> None:
    text = json.dumps({"traceEvents": TRICKY}, indent=1)
    bad_at = text.index('"nested')
    path = tmp_path / "bad.json"
    path.write_text(text[:bad_at] + '"nested": @@@, ' + text[bad_at:])
    msg = _offset_error(path)
    assert "malformed JSON" in msg and "event #2" in msg
    offset = int(msg.split("byte ")[1].split(",")[0])
    assert abs(offset - (bad_at + len('"nested": '))) <= 2


@pytest.mark.parametrize(
    "content,expect",
    [
        (b"", "empty"),
        (b"   \n", "empty"),
        (b"hello", "not a JSON trace"),
        (b'{"schemaVersion": 1}', "no 'traceEvents'"),
        (b'{"traceEvents": {}}', "not an array"),
        (b'{"traceEvents": []}', "no timed events"),
        (b'{"traceEvents": [1, 2]}', "expected an event object"),
        (b'{"traceEvents": [{"ph": "X"', "truncated"),
    ],
)
def test_bad_files_one_clear_line(tmp_path: Path, content: bytes, expect: str) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(content)
    assert expect in _offset_error(path)


def test_missing_file_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        load_trace(tmp_path / "nope.json")


def test_deep_nesting_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"traceEvents": [{"ph": "X", "args": ' + "[" * 100_000 + "]" * 100_000 + "}]}")
    with pytest.raises(FormatError):
        load_trace(path)


def test_microsecond_to_ns_keeps_precision(tmp_path: Path) -> None:
    big = 1707417525509335  # 16-digit integer microseconds, as Kineto writes epoch-based times
    events = [step(1, big, 3154), op("a", big + 0.5, 1.25)]
    data = load_trace(write_trace(tmp_path / "t.json", events))
    assert sorted(data.host.start.tolist()) == [big * 1000, big * 1000 + 500]
    assert sorted((data.host.end - data.host.start).tolist()) == [1250, 3_154_000]


def test_absurd_times_are_skipped_not_overflowed(tmp_path: Path) -> None:
    events = [step(1, 0, 100), op("ok", 1, 5), op("far future", 1e300, 5), op("huge", 2, 1e300),
              op("negative duration", 3, -7)]
    data = load_trace(write_trace(tmp_path / "t.json", events))
    assert data.skipped_no_time == 1
    assert (data.host.end >= data.host.start).all()
    assert int(data.host.end.max()) < 2**63 - 1


@pytest.mark.parametrize("chunk", [64, 1 << 20])
def test_metadata_after_events_with_cut_patterns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 chunk: int) -> None:
    monkeypatch.setattr(reader_mod, "CHUNK_BYTES", chunk)
    events = [op(f"op{i}", i, 1) for i in range(200)]
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": ' + json.dumps(events)
                    + ', "deviceProperties": [{"id": 0}, {"id": 1}], "note": "},{"}')
    got, r = read_all(path)
    assert [e.name for e in got] == [e["name"] for e in events]
    assert r.stats.metadata == {"deviceProperties": [{"id": 0}, {"id": 1}], "note": "},{"}
