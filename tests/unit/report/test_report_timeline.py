"""The Chrome/Perfetto timeline and the collapsed-stack flamegraph."""

from __future__ import annotations

import json
from collections import Counter

from stave.measure import FrameKey, StackProfile
from stave.report.flamegraph import collapsed_stacks
from stave.report.timeline import timeline_json, timeline_json_ranks


def _events(trace: dict, ph: str) -> list[dict]:
    return [e for e in trace["traceEvents"] if e["ph"] == ph]


def test_steps_and_phases_are_slices_inside_their_step(result) -> None:
    record = result.record
    trace = timeline_json(record)
    json.dumps(trace, allow_nan=False)
    slices = _events(trace, "X")
    steps = {e["args"]["step"]: e for e in slices if e["cat"] == "step"}
    assert sorted(steps) == [s.index for s in record.steps]
    assert steps[0]["ts"] >= 0
    phases = [e for e in slices if e["cat"] == "phase"]
    assert len(phases) == len(record.spans)
    for ph in phases:
        step = steps[ph["args"]["step"]]
        assert step["ts"] - 1e-6 <= ph["ts"] and ph["ts"] + ph["dur"] <= step["ts"] + step["dur"] + 1e-6
        assert "layout" not in ph["args"]  # positions come from recorded spans
    # One track per phase kind, named; slices of a track never overlap.
    names = {e["tid"]: e["args"]["name"] for e in _events(trace, "M") if e["name"] == "thread_name"}
    assert names[0] == "optimizer steps" and "data_wait" in names.values()
    by_tid: dict[int, list[dict]] = {}
    for e in slices:
        by_tid.setdefault(e["tid"], []).append(e)
    for track in by_tid.values():
        track.sort(key=lambda e: e["ts"])
        assert all(a["ts"] + a["dur"] <= b["ts"] + 1e-6 for a, b in zip(track, track[1:]))
    wait = next(e for e in phases if e["name"] == "data_wait" and e["args"]["step"] == 5)
    assert wait["dur"] == record.steps[5].data_wait_ns / 1e3


def test_counters_leave_absent_readings_out(result) -> None:
    trace = timeline_json(result.record)
    counters = _events(trace, "C")
    tracks = Counter(e["name"] for e in counters)
    assert tracks["CPU % of one core"] == len(result.record.host)
    assert "GPU %" not in tracks  # no GPU readings: no track, rather than a track of zeros
    rss = next(e for e in counters if e["name"] == "host memory GiB")
    assert rss["args"]["RSS"] == result.record.host[0].rss_bytes / 2**30


def test_steps_without_spans_are_laid_out_and_flagged(single_result) -> None:
    record = single_result.record
    record.spans = []
    trace = timeline_json(record)
    phases = [e for e in _events(trace, "X") if e["cat"] == "phase"]
    assert phases and all(e["args"]["layout"] == "sequential" for e in phases)
    step3 = [e for e in phases if e["args"]["step"] == 3]
    assert sum(e["dur"] for e in step3) == (record.steps[3].duration_ns - record.steps[3].other_ns) / 1e3


def test_ranks_are_processes(result) -> None:
    trace = timeline_json_ranks(result.rank_records)
    assert {e["pid"] for e in trace["traceEvents"]} == {0, 1}
    names = [e["args"]["name"] for e in _events(trace, "M") if e["name"] == "process_name"]
    assert names[0].startswith("rank 0") and names[1].startswith("rank 1")
    assert trace["otherData"]["ranks"] == [0, 1]


def test_collapsed_stacks_count_every_sample(result) -> None:
    profile = result.record.stacks
    text = collapsed_stacks(profile)
    lines = text.splitlines()
    counts = [int(line.rsplit(" ", 1)[1]) for line in lines]
    assert sum(counts) == len(profile.samples)
    assert counts == sorted(counts, reverse=True)
    assert lines[0].startswith("<module> (sample_train.py:")
    assert ";__next__ (dataloader.py:733) " in lines[0]  # the data wait dominates
    assert text.endswith("\n")


def test_collapsed_stacks_keep_separators_out_of_frames() -> None:
    profile = StackProfile(interval_ns=1, frames=[FrameKey("/a;b.py", 3, "f;g", True)], stacks=[[0], []],
                           samples=[[0, 0, "forward", 0], [1, 0, "forward", 0], [2, 0, "other", 1]])
    assert collapsed_stacks(profile) == "f,g (a,b.py:3) 2\n<idle> 1\n"
    assert collapsed_stacks(StackProfile()) == ""
