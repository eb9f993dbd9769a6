"""The doctor's sampler thread: host metrics at ~10 Hz and the main thread's Python stack at ~50 Hz.

The stack is read through ``sys._current_frames()``, so nothing is injected into the user's process
(no signals, no tracing hooks). The thread holds the GIL while it runs Python, which is time taken
from the user's loop, so each tick is kept cheap: counters come from pre-opened ``/proc`` files
(:mod:`stave.monitor.procfs`), child processes are scanned at most once a second, frames are
interned. The thread measures its own CPU time (:attr:`Monitor.self_cpu_s`) so the doctor can
report what watching cost.

Timestamps are ``time.perf_counter_ns()``, the clock of :class:`stave.device.StepClock`, so samples
line up with the capture's step records.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Callable

from stave.measure.host import HostSample
from stave.measure.stacks import StackProfile
from stave.monitor.host import HostCollector, default_source
from stave.monitor.procfs import ProcPaths
from stave.monitor.stacks import StackRecorder

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

# 2**15 host samples is 55 minutes at 10 Hz, ~24 MB of HostSample objects. Beyond it every other
# sample is dropped and the interval doubled, so a day-long run stays within that bound too.
MAX_HOST_SAMPLES = 1 << 15
# The last, partial interval is kept only when it is at least this share of a full one: rates over
# a few milliseconds are dominated by the 10 ms resolution of the kernel's CPU counters.
FINAL_SAMPLE_MIN_SHARE = 0.5
# How early a host sample may be taken to share a wake-up with a stack sample: well under the
# 100 ms host interval, so rates stay accurate, and above the scheduler's usual wake-up jitter.
HOST_TICK_EARLY_S = 0.005
# Longest stop() may wait for a sleeping sampler to notice: above it the thread waits on the stop
# event instead of sleeping (the default 20 ms stack interval is below it, so sleeps are short).
STOP_LATENCY_S = 0.05


class Monitor:
    """One daemon thread: host metrics every host_interval_s, the main thread's Python stack every stack_interval_s.

    ``position()`` returns the main thread's (step index, phase name); it is called at every sample
    and the result is stored with it. ``worker_pids()`` returns the live DataLoader worker PIDs.
    ``proc_paths`` relocates the kernel files (tests use it to simulate a machine that hides some).
    Should the thread fail (a callback raising, say), sampling stops, the user's run goes on and
    :attr:`error` says why, for the report.
    """

    def __init__(
        self,
        *,
        position: Callable[[], tuple[int, str]],
        worker_pids: Callable[[], list[int]],
        main_thread_id: int | None = None,
        device: "torch.device | str" = "cpu",
        host_interval_s: float = 0.1,
        stack_interval_s: float = 0.02,
        stacks: bool = True,
        proc_paths: ProcPaths | None = None,
        job_root_pid: int | None = None,
    ) -> None:
        if not host_interval_s > 0 or not stack_interval_s > 0:
            raise ValueError(
                f"sampling intervals must be > 0 s, got host {host_interval_s}, stack {stack_interval_s}"
            )
        self._position = position
        self._worker_pids = worker_pids
        self._main_thread_id = main_thread_id if main_thread_id is not None else threading.main_thread().ident
        self._device = device
        self._host_interval_s = host_interval_s
        self._stacks_enabled = stacks
        self._proc_paths = proc_paths
        self._job_root_pid = job_root_pid
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._host: list[HostSample] = []
        self._host_thinned = 0
        self._recorder = StackRecorder(int(stack_interval_s * 1e9))
        self._self_cpu_ns = 0
        self._collector: HostCollector | None = None
        self.error: str | None = None

    # --- Public API ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the sampler thread (once)."""
        if self._thread is not None:
            raise RuntimeError("Monitor.start() called twice; a Monitor runs once")
        self._collector = HostCollector(
            default_source(self._proc_paths),
            main_pid=os.getpid(),
            worker_pids=self._worker_pids,
            device=self._device,
            job_root_pid=self._job_root_pid,
        )
        self._thread = threading.Thread(target=self._run, name="stave-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and wait for it; safe to call any number of times, or before start."""
        thread = self._thread
        if thread is None:
            return
        self._stop.set()
        if thread.is_alive() and thread is not threading.current_thread():
            thread.join()

    @property
    def running(self) -> bool:
        """True while the sampler thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def self_cpu_s(self) -> float:
        """CPU seconds the sampler thread has used so far (its cost to the user's process)."""
        return self._self_cpu_ns / 1e9

    @property
    def host_interval_s(self) -> float:
        """Current host sampling interval (doubles each time long runs are thinned)."""
        return self._host_interval_s * (2 ** self._host_thinned)

    def host_samples(self) -> list[HostSample]:
        """A copy of the host samples so far (the samples themselves are never modified later)."""
        with self._lock:
            return list(self._host)

    def stack_profile(self) -> StackProfile:
        """A copy of the stack samples so far (empty, with ``interval_ns`` 0, when stacks are off)."""
        if not self._stacks_enabled:
            return StackProfile()
        with self._lock:
            return self._recorder.profile()

    # --- The thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        cpu0 = time.thread_time_ns()
        collector = self._collector
        assert collector is not None
        try:
            self._loop(collector, cpu0)
        except Exception as exc:  # noqa: BLE001 - the user's run must go on; the doctor reports it
            self.error = f"{type(exc).__name__}: {exc}"
            log.warning("stave monitor stopped early: %s", self.error, exc_info=True)
        finally:
            collector.close()
            self._self_cpu_ns = time.thread_time_ns() - cpu0

    def _loop(self, collector: HostCollector, cpu0: int) -> None:
        collector.baseline()
        now = time.perf_counter()
        next_host = now + self.host_interval_s
        last_host = now
        next_stack = now
        while True:
            now = time.perf_counter()
            if self._stacks_enabled and now >= next_stack:
                self._sample_stack()
                next_stack = self._next(next_stack, self._recorder.interval_ns / 1e9, now)
            # A host tick due within a few ms rides on this wake-up: each wake-up of a sleeping
            # thread costs tens of microseconds of CPU on a busy machine, more than a stack sample.
            if now >= next_host - HOST_TICK_EARLY_S:
                self._sample_host(collector)
                last_host = now
                next_host = self._next(next_host, self.host_interval_s, now)
            self._self_cpu_ns = time.thread_time_ns() - cpu0
            if self._stop.is_set():
                break
            wake = min(next_host, next_stack) if self._stacks_enabled else next_host
            wait_s = max(0.0, wake - time.perf_counter())
            # Short waits use time.sleep: a wake-up through Event.wait costs about twice the CPU
            # (it allocates and acquires a lock each time), and stop() can afford to wait that long.
            if wait_s > STOP_LATENCY_S:
                self._stop.wait(wait_s)
            else:
                time.sleep(wait_s)
        if time.perf_counter() - last_host >= FINAL_SAMPLE_MIN_SHARE * self.host_interval_s:
            self._sample_host(collector)

    @staticmethod
    def _next(deadline: float, interval: float, now: float) -> float:
        # Stay on the grid, but after a stall (the GIL held for long) skip the missed ticks
        # instead of firing them back to back.
        deadline += interval
        return deadline if deadline > now else now + interval

    def _sample_stack(self) -> None:
        frame = sys._current_frames().get(self._main_thread_id)
        if frame is None:
            return  # the main thread has ended
        t_ns = time.perf_counter_ns()
        step, phase = self._position()
        with self._lock:
            self._recorder.record(frame, t_ns, step, phase)
        del frame  # do not keep the user's frame (and its locals) alive until the next tick

    def _sample_host(self, collector: HostCollector) -> None:
        step, _phase = self._position()
        sample = collector.sample(time.perf_counter_ns(), step)
        with self._lock:
            if len(self._host) >= MAX_HOST_SAMPLES:
                self._host = self._host[::2]
                self._host_thinned += 1
            self._host.append(sample)
