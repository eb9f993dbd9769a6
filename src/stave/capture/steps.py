"""Step and phase accounting on the main thread.

Hooks call :meth:`StepTracker.enter` / :meth:`StepTracker.exit` around data fetches, copies,
forward, backward and the optimizer. Only the outermost phase of the main thread counts (a
module called while loading data is data loading; a copy inside forward is forward), so the
phases never overlap and add up to at most the step.

Step boundaries come from ``optimizer.step()``. With several optimizers, a step is one full cycle
of them: the cycle is learned when the first optimizer steps a second time, and the first step
is closed then, retroactively, at the end of the cycle's last ``step()``.

A loop that updates its parameters by hand (pytorch/examples' word language model: backward, clip,
``p.data.add_(p.grad, alpha=-lr)``, then ``model.zero_grad()``) has no ``optimizer.step()``. While
no optimizer has stepped, a ``zero_grad()`` that follows a backward is then the boundary: gradients
are cleared once per update, after every micro-batch's backward (accumulation included), and in a
loop with an optimizer the step always comes between the backward and the clearing. The first
``optimizer.step()`` ends this: from then on the optimizer's steps are the boundaries.

On a GPU every boundary also records a CUDA event (``device.StepClock``); steps are resolved from
the events once the GPU has passed them, so no synchronization is added to the user's loop.

Evaluation between optimizer steps is the ``eval`` phase (forwards the loop hooks classify as
evaluation). When a step is resolved, each run of evaluation forwards, together with the batch
fetches and copies that feed them, becomes the step's ``eval_ns``, from the first such fetch to
the last evaluation forward: the training phases and samples leave it out.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from stave.capture.batch_walk import TokenCount, TokenTotals
from stave.capture.compile_stats import frames_total
from stave.device import Mark, StepClock
from stave.measure.steps import PhaseSpan, StepRecord

log = logging.getLogger(__name__)

# Spans kept for the --timeline output; older ones are dropped (a long run would otherwise grow
# without bound). 200k spans is a few hours of a typical loop and ~20 MB.
MAX_TIMELINE_SPANS = 200_000
# Phases that may run inside ``optimizer.step(closure)`` and are counted as themselves.
CLOSURE_PHASES = ("forward", "backward")
# Phases that feed an evaluation forward when they come right before it (its batch fetch and copy).
EVAL_FEED_PHASES = ("data_wait", "h2d")


@dataclass
class _Span:
    phase: str
    start: Mark
    end: Mark
    samples: int = 0
    nbytes: int = 0
    model_samples: int = 0
    tokens: list[TokenCount] = field(default_factory=list)
    # The trainer process's CPU (all its threads) over a data_wait span, nanoseconds; 0 for others.
    cpu_ns: int = 0


@dataclass
class _PendingStep:
    index: int
    start: Mark
    end: Mark
    spans: list[_Span] = field(default_factory=list)
    warmup: bool = False
    profiled: bool = False
    flop_counted: bool = False
    rss_bytes: int = 0
    cpu_ns: int = 0
    compiled_frames: int = 0


def _process_cpu_ns() -> int:
    """CPU time of this process, all its threads (CLOCK_PROCESS_CPUTIME_ID: one clock read, about a
    microsecond); 0 where the clock is missing."""
    try:
        return time.process_time_ns()
    except OSError:
        return 0


class _ResidentMemory:
    """The process's resident bytes from ``/proc/self/statm``, read through one open descriptor
    (a ``pread`` costs microseconds, small beside a step); 0 where the file is absent."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._pid = -1
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._absent = False

    def read(self) -> int:
        if self._absent:
            return 0
        try:
            if self._fd is None or self._pid != os.getpid():
                self._pid = os.getpid()
                self._fd = os.open("/proc/self/statm", os.O_RDONLY)
            fields = os.pread(self._fd, 128, 0).split()
            return int(fields[1]) * self._page
        except (OSError, ValueError, IndexError):
            self._absent = True  # not Linux, or no procfs: stop trying
            return 0


class StepTracker:
    """Turns hook calls into :class:`StepRecord`s.

    ``on_step_end(index)`` is called on the main thread right after step ``index`` closes; it
    may raise (``--steps`` reached) to stop the script.
    """

    def __init__(self, clock: StepClock, main_thread_id: int | None = None) -> None:
        self.clock = clock
        self.main_thread_id = main_thread_id if main_thread_id is not None else threading.get_ident()
        self.steps: list[StepRecord] = []
        self.timeline: list[PhaseSpan] = []
        self.step_index = 0
        self.active: str | None = None
        self._rss = _ResidentMemory()
        self._active_start: Mark | None = None
        self._active_samples = 0
        self._active_bytes = 0
        self._active_model_samples = 0
        self._active_tokens: list[TokenCount] = []
        self._active_cpu_ns = 0
        self._step_cpu_ns = _process_cpu_ns()
        # Dynamo is usually imported by the script's torch.compile, after this: its frames so far are 0.
        self._frames_seen = frames_total() or 0
        self._suspended: str | None = None
        self._spans: list[_Span] = []
        self._step_start: Mark = clock.mark()
        self._pending: list[_PendingStep] = []
        self._cycle_len: int | None = None
        self._cycle_seen: set[int] = set()
        self._cycle_count = 0
        self._last_post: Mark | None = None
        self._last_post_cpu_ns = 0
        self._optimizer_seen = False
        self._backward_since_zero = False
        # Steps closed at zero_grad() because no optimizer stepped (a hand-written update).
        self.manual_steps = 0
        self.classify: Callable[[int], tuple[bool, bool, bool]] = lambda index: (False, False, False)
        self.on_step_end: Callable[[int], None] = lambda index: None

    @property
    def optimizer_seen(self) -> bool:
        """Whether any ``optimizer.step()`` ran (so steps are the optimizer's)."""
        return self._optimizer_seen

    # --- phases ---------------------------------------------------------------------------------

    def position(self) -> tuple[int, str]:
        """(current step index, current phase) for the sampler thread."""
        return self.step_index, self.active or "other"

    def enter(self, phase: str) -> bool:
        """Start ``phase`` if the main thread is in no phase; returns whether this call owns it.

        Forward and backward may also interrupt the optimizer phase: ``optimizer.step(closure)``
        (LBFGS, PyTorch Lightning's automatic optimization) runs the model inside the step, and
        that time is the model's, not the optimizer's. The optimizer phase resumes when they end.
        """
        if threading.get_ident() != self.main_thread_id:
            return False
        if self.active is not None:
            if self.active != "optimizer" or phase not in CLOSURE_PHASES or self._suspended is not None:
                return False
            self._suspended = self.active
            self.exit(True)
        self.active = phase
        self._active_start = self.clock.mark()
        # The CPU of the whole process over a data wait: what the trainer's threads burned while no
        # compute ran (unpickling a batch, loading in the main thread, the pool's spin), left out of
        # the compute's CPU.
        self._active_cpu_ns = _process_cpu_ns() if phase == "data_wait" else 0
        self._active_samples = 0
        self._active_bytes = 0
        self._active_model_samples = 0
        self._active_tokens = []
        return True

    def add_to_active(self, samples: int = 0, nbytes: int = 0) -> None:
        """Attach samples (a fetched batch) or bytes (a copy) to the open phase of the main thread."""
        if self.active is None or threading.get_ident() != self.main_thread_id:
            return
        self._active_samples += samples
        self._active_bytes += nbytes

    def add_model_input(self, samples: int, tokens: TokenCount | None) -> None:
        """Attach what the model's training forward consumed (rows, tokens) to the open phase."""
        if self.active is None or threading.get_ident() != self.main_thread_id:
            return
        self._active_model_samples += samples
        if tokens is not None:
            self._active_tokens.append(tokens)

    def exit(self, owned: bool) -> None:
        """End the phase opened by the matching :meth:`enter` that returned ``owned``."""
        if not owned or self._active_start is None:
            return
        end = self.clock.mark()
        cpu_ns = max(0, _process_cpu_ns() - self._active_cpu_ns) if self._active_cpu_ns else 0
        span = _Span(self.active or "other", self._active_start, end, self._active_samples, self._active_bytes,
                     self._active_model_samples, self._active_tokens, cpu_ns)
        self._spans.append(span)
        self.active = None
        self._active_start = None
        if self._suspended is not None and span.phase != self._suspended:
            # The closure's forward/backward ended: the optimizer step goes on from here.
            self.active, self._suspended = self._suspended, None
            self._active_start = end
            self._active_samples = 0
            self._active_bytes = 0
            self._active_model_samples = 0
            self._active_tokens = []

    # --- optimizer boundaries -------------------------------------------------------------------

    def grads_accumulated(self) -> None:
        """Called after each ``torch.autograd.backward`` (``loss.backward()``): gradients now sit in
        ``.grad`` for an update to use."""
        if threading.get_ident() == self.main_thread_id:
            self._backward_since_zero = True

    def grads_zeroed(self) -> None:
        """Called before each ``zero_grad()`` (module or optimizer): a step boundary when no optimizer
        has stepped and a backward ran since the last clearing (a hand-written update)."""
        if threading.get_ident() != self.main_thread_id or self.active is not None:
            return
        if not self._optimizer_seen and self._backward_since_zero:
            # A misreading at the start (a loop that discards its first gradients) is undone by the
            # first optimizer.step(): these steps are then the warm-up's, and the report says nothing.
            self.manual_steps += 1
            self._close(self.clock.mark(), _process_cpu_ns())
        self._backward_since_zero = False

    def optimizer_pre(self, optimizer_id: int) -> None:
        """Called before each ``optimizer.step()``."""
        self._optimizer_seen = True
        if self._cycle_len is None:
            if optimizer_id in self._cycle_seen and self._last_post is not None:
                # The first optimizer stepped again: the cycle is complete and the first step
                # ended at the previous step()'s end.
                self._cycle_len = len(self._cycle_seen)
                self._close(self._last_post, self._last_post_cpu_ns)
            else:
                self._cycle_seen.add(optimizer_id)

    def optimizer_post(self, optimizer_id: int) -> None:
        """Called after each ``optimizer.step()`` (its time is already closed as a phase)."""
        self._last_post = self.clock.mark()
        self._last_post_cpu_ns = _process_cpu_ns()
        if self._cycle_len is None:
            return
        self._cycle_count += 1
        if self._cycle_count >= self._cycle_len:
            self._cycle_count = 0
            self._close(self._last_post, self._last_post_cpu_ns)

    def finish(self) -> None:
        """At the end of the run: resolve what the GPU has finished (caller synchronizes first).

        Spans after the last completed step belong to no step and are left out.
        """
        self._resolve(final=True)

    # --- internals ------------------------------------------------------------------------------

    def _close(self, end: Mark, cpu_end_ns: int) -> None:
        index = self.step_index
        mine = [s for s in self._spans if s.start.host_ns < end.host_ns]
        self._spans = [s for s in self._spans if s.start.host_ns >= end.host_ns]
        warmup, profiled, flop = self.classify(index)
        # The CPU reading taken with the step's end mark (a step closed retroactively ended then).
        pending = _PendingStep(index, self._step_start, end, mine, warmup, profiled, flop, self._rss.read(),
                               max(0, cpu_end_ns - self._step_cpu_ns) if self._step_cpu_ns and cpu_end_ns else 0)
        # Frames torch.compile compiled inside this step (dynamo's counter; nothing without dynamo).
        frames = frames_total()
        if frames is not None:
            pending.compiled_frames = max(0, frames - self._frames_seen)
            self._frames_seen = frames
        self._step_cpu_ns = cpu_end_ns
        self._pending.append(pending)
        self._step_start = end
        self.step_index = index + 1
        for span in mine:
            if len(self.timeline) >= MAX_TIMELINE_SPANS:
                break
            self.timeline.append(PhaseSpan(span.phase, span.start.host_ns, span.end.host_ns, index))
        self._resolve(final=False)
        self.on_step_end(index)

    def _resolve(self, final: bool) -> None:
        while self._pending:
            step = self._pending[0]
            if not final and not self.clock.ready(step.end):
                return
            self._pending.pop(0)
            self.steps.append(self._to_record(step))

    def _to_record(self, p: _PendingStep) -> StepRecord:
        rec = StepRecord(
            index=p.index,
            start_ns=p.start.host_ns,
            end_ns=p.start.host_ns + self.clock.elapsed_ns(p.start, p.end),
            warmup=p.warmup,
            profiled=p.profiled,
            flop_counted=p.flop_counted,
            device_timed=p.end.event is not None,
            rss_bytes=p.rss_bytes,
            cpu_ns=p.cpu_ns,
            compiled_frames=p.compiled_frames,
        )
        eval_runs = eval_runs_of([span.phase for span in p.spans])
        in_eval = {i for first, last in eval_runs for i in range(first, last + 1)}
        for first, last in eval_runs:
            rec.eval_ns += max(0, self.clock.elapsed_ns(p.spans[first].start, p.spans[last].end))
        model_samples = 0
        token_rows = 0
        totals = TokenTotals()
        for i, span in enumerate(p.spans):
            if i in in_eval:
                rec.eval_forwards += span.phase == "eval"
                continue
            ns = max(0, self.clock.elapsed_ns(span.start, span.end))
            rec.samples += span.samples
            rec.h2d_bytes += span.nbytes
            model_samples += span.model_samples
            for count in span.tokens:
                totals.add(count)
                token_rows += count.rows
            if span.phase == "data_wait":
                rec.data_wait_ns += ns
                rec.data_wait_cpu_ns += span.cpu_ns
                rec.data_fetches += 1
            elif span.phase == "h2d":
                rec.h2d_ns += ns
            elif span.phase == "forward":
                rec.forward_ns += ns
                rec.forward_calls += 1
            elif span.phase == "backward":
                rec.backward_ns += ns
                rec.backward_calls += 1
            elif span.phase == "optimizer":
                rec.optimizer_ns += ns
        if token_rows:
            # Token-id rows the training forwards consumed: exact per optimizer step, whatever the
            # loader prefetches ahead (accelerate's and Lightning's fetchers run one batch early).
            rec.samples = token_rows
        elif rec.samples == 0:
            # No DataLoader batch (a loop that slices its own tensors): the rows the model consumed.
            rec.samples = model_samples
        for name in ("tokens", "real_tokens", "longest_tokens", "token_sq", "real_token_sq", "longest_token_sq"):
            setattr(rec, name, getattr(totals, name))
        return rec


def eval_runs_of(phases: list[Any]) -> list[tuple[int, int]]:
    """Index ranges ``(first, last)`` of the evaluation runs in a step's span phases.

    A run starts at the batch fetches/copies right before its first ``eval`` span (the loop fetched
    them for evaluation) and ends at its last ``eval`` span; fetches after that belong to training.
    Any training phase (forward, backward, optimizer) ends a run.
    """
    runs: list[tuple[int, int]] = []
    feed_start: int | None = None
    run_start: int | None = None
    last_eval: int | None = None
    for i, phase in enumerate(phases):
        if phase == "eval":
            if run_start is None:
                run_start = feed_start if feed_start is not None else i
            last_eval = i
            feed_start = None
        elif phase in EVAL_FEED_PHASES:
            if feed_start is None:
                feed_start = i
        else:
            if run_start is not None and last_eval is not None:
                runs.append((run_start, last_eval))
            run_start = last_eval = feed_start = None
    if run_start is not None and last_eval is not None:
        runs.append((run_start, last_eval))
    return runs
