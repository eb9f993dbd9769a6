"""Which files are the user's, the interning stack store, and stack samples of a fake main thread."""

from __future__ import annotations

import inspect
import json
import os
import sys
import threading
import time

import torch

import stave
from stave.measure.stacks import FrameKey
from stave.monitor import Monitor, is_user_file
from stave.monitor.stacks import TRUNCATED, StackRecorder


def test_user_files_exclude_stdlib_packages_stave_and_pseudo_files(tmp_path) -> None:
    assert not is_user_file(json.__file__)  # standard library
    assert not is_user_file(os.path.join(os.path.dirname(os.__file__), "lib-dynload", "x.so"))
    assert not is_user_file(torch.__file__)  # site-packages
    assert not is_user_file("/usr/lib/python3/dist-packages/foo/bar.py")
    assert not is_user_file(stave.__file__)
    assert not is_user_file(os.path.join(os.path.dirname(stave.__file__), "monitor", "sampler.py"))
    for pseudo in ("<frozen importlib._bootstrap>", "<string>", "<eval_with_key>.3", ""):
        assert not is_user_file(pseudo), pseudo
    assert is_user_file(__file__)
    assert is_user_file(str(tmp_path / "train.py"))
    assert is_user_file("<ipython-input-3-abcdef>")


def _recurse(n: int, recorder: StackRecorder) -> int:
    if n == 0:
        return recorder.stack_id(sys._getframe())
    return _recurse(n - 1, recorder)


def test_recorder_interns_frames_and_caps_depth() -> None:
    recorder = StackRecorder(1000, max_depth=16)
    sid = _recurse(40, recorder)
    again = _recurse(40, recorder)
    assert sid == again
    profile = recorder.profile()
    stack = profile.stacks[sid]
    assert len(stack) == 17
    assert profile.frames[stack[0]] == TRUNCATED
    innermost = profile.frames[stack[-1]]
    assert innermost.function == "_recurse" and innermost.user and innermost.file == __file__
    # The 16 kept frames are _recurse at two distinct lines (the base case and the recursive call).
    assert len({profile.frames[f] for f in stack[1:]}) == 2


def test_recorder_thins_uniformly_and_doubles_its_interval() -> None:
    recorder = StackRecorder(1000, max_samples=8)
    frame = sys._getframe()
    t_ns = 0
    for i in range(20):
        recorder.record(frame, t_ns=t_ns, step=i, phase="forward" if i % 2 else "backward")
        t_ns += recorder.interval_ns  # the monitor paces itself by the recorder's interval
    profile = recorder.profile()
    assert len(profile.samples) <= 8
    assert profile.interval_ns == 1000 * 2**recorder.thinned and recorder.thinned >= 1
    times = [s[0] for s in profile.samples]
    assert times == sorted(times)
    gaps = {b - a for a, b in zip(times, times[1:])}
    assert gaps == {profile.interval_ns}  # still evenly spaced
    recorder.record(frame, t_ns=times[-1] + 10, step=0, phase="forward")  # far too soon: dropped
    assert len(recorder) == len(profile.samples)
    assert {s[2] for s in profile.samples} <= {"forward", "backward"}


def _marker_line(func, marker: str) -> int:
    lines, first = inspect.getsourcelines(func)
    return first + next(i for i, text in enumerate(lines) if marker in text)


def fake_data_wait(state: dict, until: float) -> None:
    state["pos"] = (1, "data_wait")
    while time.perf_counter() < until:
        time.sleep(0.002)  # marker: wait


def fake_forward(state: dict, until: float) -> None:
    state["pos"] = (2, "forward")
    a = torch.ones(256, 256)
    while time.perf_counter() < until:
        a = torch.mm(a, a).clamp_(0, 1)  # marker: compute


def fake_main(state: dict, ready: threading.Event) -> None:
    ready.wait()
    fake_data_wait(state, time.perf_counter() + 0.4)
    fake_forward(state, time.perf_counter() + 0.4)
    state["pos"] = (3, "other")


def test_stack_samples_land_on_the_fake_main_threads_lines_with_their_position() -> None:
    state = {"pos": (0, "")}
    ready = threading.Event()
    thread = threading.Thread(target=fake_main, args=(state, ready), name="fake-main")
    thread.start()
    monitor = Monitor(position=lambda: state["pos"], worker_pids=list, main_thread_id=thread.ident,
                      host_interval_s=0.1, stack_interval_s=0.01)
    monitor.start()
    ready.set()
    thread.join()
    monitor.stop()
    profile = monitor.stack_profile()
    assert monitor.error is None
    wait_line = _marker_line(fake_data_wait, "marker: wait")
    compute_line = _marker_line(fake_forward, "marker: compute")
    for step, phase, func, line in ((1, "data_wait", "fake_data_wait", wait_line), (2, "forward", "fake_forward", compute_line)):
        rows = [s for s in profile.samples if s[1] == step]
        assert len(rows) >= 10, (step, len(rows))
        assert {s[2] for s in rows} == {phase}
        counts = profile.line_counts(steps=[step])
        top, hits = counts.most_common(1)[0]
        assert top == FrameKey(__file__, line, func, True)
        assert hits >= 0.5 * len(rows)
        # The innermost user frame sits under fake_main, which called it: the stack is outermost first.
        stack = profile.stacks[rows[0][3]]
        names = [profile.frames[f].function for f in stack]
        assert names.index("fake_main") < names.index(func)
    collapsed = profile.collapsed()
    assert any(key.endswith(f"fake_data_wait (test_monitor_stacks.py:{wait_line})") for key in collapsed)
