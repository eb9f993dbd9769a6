"""Time each rank's wait inside DDP's gradient all-reduce, through DDP's communication hook.

DDP hands each gradient bucket to its communication hook as soon as the bucket's gradients are
computed, and at the end of backward waits for every bucket's all-reduce to finish. A rank that
arrives late finds the others already there and waits little; the others wait for it. So the
wait *this* rank pays is the time from its last bucket's launch (its own backward compute is done)
to the last all-reduce's completion. That difference needs no clock shared across ranks.

How: every DDP model gets a timed hook that calls the real one (the user's own hook if they
registered one, never replaced; otherwise ``allreduce_hook``, DDP's documented equivalent of its
built-in all-reduce, which gives bitwise-identical gradients) and stamps launch and completion;
an autograd final callback, queued behind DDP's own, closes each backward's round. DDP allows one
hook per model, registered before training, so the timed hook is registered lazily at the model's
first forward unless the user registered theirs before (then theirs is wrapped as they register it).
A model with a C++ built-in hook (``_register_builtin_comm_hook``) is left alone and not timed.

On a GPU the stamps are CUDA events (``device.StepClock``), read once the GPU has passed them; no
synchronization is added.
"""

from __future__ import annotations

import bisect
import functools
import logging
import time
import weakref
from typing import Any, Callable, Sequence

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from stave.device import Mark, StepClock
from stave.measure.dist import DistInfo
from stave.measure.steps import StepRecord

log = logging.getLogger(__name__)

# Unused-parameter checks run on this many synchronized backward passes (after the first, which
# DDP may use to rebuild buckets): enough to see a branch that skips parameters every step, and
# each costs one pass over the parameters.
UNUSED_CHECK_ROUNDS = 3
# Events kept for placing onto steps (three small tuples per step): a week of 1-second steps.
MAX_EVENTS = 2_000_000


def place_by_time(events: list[tuple[int, int]], steps: Sequence[StepRecord]) -> dict[int, tuple[int, int]]:
    """Sum ``(host_ns, value)`` events per step whose host interval holds them: {index: (count, total)}.

    A step's interval runs from its start to the next step's start (the last one: to its end).
    Events before the first step or after the last are left out (their step is not closed yet).
    """
    if not steps:
        return {}
    starts = [s.start_ns for s in steps]
    out: dict[int, tuple[int, int]] = {}
    for t, value in events:
        i = bisect.bisect_right(starts, t) - 1
        if i < 0 or (i == len(steps) - 1 and t >= steps[-1].end_ns):
            continue
        count, total = out.get(steps[i].index, (0, 0))
        out[steps[i].index] = (count + 1, total + value)
    return out


class _TimedHook:
    """The function DDP calls per bucket: the real hook, timed. ``inner``/``state`` may be swapped
    when the user registers their hook after the timed one went in (DDP allows one registration)."""

    def __init__(self, timer: "CommTimer", inner: Callable[..., Any], state: Any) -> None:
        self.timer = timer
        self.inner = inner
        self.state = state

    def __call__(self, state: Any, bucket: Any) -> Any:
        return self.timer.launched(self.inner(self.state, bucket), bucket)


def _hook_function(hook: _TimedHook, name: str) -> Callable[..., Any]:
    # DDP inspects the hook's signature (a parameter named "bucket", no annotation other than
    # GradBucket: hence none here) and its __name__, and logs its __qualname__: a plain function
    # carrying the real hook's names keeps all of that unchanged.
    def timed(state, bucket):  # type: ignore[no-untyped-def]
        return hook(state, bucket)

    timed.__name__ = name.rsplit(".", 1)[-1]
    timed.__qualname__ = name
    return timed


class CommTimer:
    """Collects launch/completion stamps per backward round and turns them into per-step waits.

    Waits are placed onto steps by host time when a record is built, not added to "the current
    step" as they happen: the doctor closes the first step only when the optimizer cycle is known
    (retroactively), so while it runs the current step's index is not yet certain.
    """

    def __init__(self, clock: StepClock, info: DistInfo) -> None:
        self.clock = clock
        self.info = info
        self.active = True
        self._round: list[list[Any]] | None = None
        self._pending: list[tuple[Mark, Mark]] = []
        self._waits: list[tuple[int, int]] = []  # (host_ns inside the step, wait_ns)
        self._rounds: list[tuple[int, int]] = []  # (host_ns, 1) per synchronized backward
        self._searches: list[tuple[int, int]] = []  # (host_ns, ns) of DDP's unused-parameter search
        self._models: list[weakref.ref[Any]] = []
        self._rounds_done = 0

    def track(self, model: Any) -> None:
        """Remember a DDP model (for the unused-parameter checks)."""
        self._models.append(weakref.ref(model))

    @property
    def rounds_seen(self) -> int:
        """Synchronized backward passes so far."""
        return self._rounds_done

    @property
    def search_ns_total(self) -> int:
        """Time in DDP's unused-parameter search so far."""
        return sum(ns for _, ns in list(self._searches))

    # --- per bucket ------------------------------------------------------------------------------

    def launched(self, fut: Any, bucket: Any) -> Any:
        """Stamp a bucket's launch and chain a completion stamp onto its future."""
        # Collectives return torch._C.Future (the base of torch.futures.Future): test for .then.
        if not self.active or not callable(getattr(fut, "then", None)):
            return fut
        if self._round is None:
            try:
                torch.autograd.Variable._execution_engine.queue_callback(self._round_end)
            except RuntimeError as exc:  # outside a backward pass: nothing to close the round
                log.debug("comm hook called outside backward: %s", exc)
                return fut
            self._round = []
        entry: list[Any] = [self.clock.mark(), None]
        self._round.append(entry)
        self.info.comm_buckets += 1
        try:
            buf = bucket.buffer()
            self.info.comm_bytes += buf.numel() * buf.element_size()
        except (AttributeError, RuntimeError):
            pass  # a compiled DDP passes (grad, param) tuples: no bucket buffer to count

        def done(f: Any) -> Any:
            entry[1] = self.clock.mark()
            return f.value()

        return fut.then(done)

    # --- per backward round ----------------------------------------------------------------------

    def _round_end(self, requeued: bool = False) -> None:
        entries = self._round or []
        if not requeued and any(e[1] is None for e in entries):
            # DDP queues its own end-of-backward callback (which waits for every bucket) only when
            # the last bucket is ready, after ours: go behind it once, so the waits are over.
            try:
                torch.autograd.Variable._execution_engine.queue_callback(lambda: self._round_end(requeued=True))
                return
            except RuntimeError as exc:
                log.debug("could not requeue the round's end: %s", exc)
        self._round = None
        if not entries:
            return
        self._rounds_done += 1
        if len(self._rounds) < MAX_EVENTS:
            self._rounds.append((entries[0][0].host_ns, 1))
        if 1 < self._rounds_done <= 1 + UNUSED_CHECK_ROUNDS:
            self._check_unused()
        launches = [e[0] for e in entries]
        dones = [e[1] for e in entries if e[1] is not None]
        if len(dones) < len(launches):
            return  # a bucket still in flight after DDP's own wait: nothing sound to measure
        if launches[-1].event is not None:
            # GPU: buckets complete in launch order on the communication stream.
            self._pending.append((launches[-1], entries[-1][1]))
        else:
            last_launch = max(launches, key=lambda m: m.host_ns)
            self._pending.append((last_launch, max(dones, key=lambda m: m.host_ns)))
        self.resolve(final=False)

    def resolve(self, final: bool) -> None:
        """Turn stamps the device has passed into waits (all of them when ``final``, after a sync).

        Called on the thread that runs backward (and once at the end): never concurrently.
        """
        keep: list[tuple[Mark, Mark]] = []
        for start, end in self._pending:
            if not final and not (self.clock.ready(start) and self.clock.ready(end)):
                keep.append((start, end))
            elif len(self._waits) < MAX_EVENTS:
                self._waits.append((start.host_ns, max(0, self.clock.elapsed_ns(start, end))))
        self._pending = keep

    def assign(self, steps: Sequence[StepRecord]) -> None:
        """Set each step's ``comm_wait_ns`` and the per-step counters of ``info`` from the events.

        Idempotent (values are set, not added), so periodic records may call it again and again.
        """
        steps = list(steps)
        waits = place_by_time(list(self._waits), steps)
        for rec in steps:
            rec.comm_wait_ns = waits.get(rec.index, (0, 0))[1]
        size = max((s.index for s in steps), default=-1) + 1
        rounds = place_by_time(list(self._rounds), steps)
        self.info.rounds_by_step = [rounds.get(i, (0, 0))[0] for i in range(size)]
        searches = place_by_time(list(self._searches), steps)
        self.info.find_unused_ns_by_step = [searches.get(i, (0, 0))[1] for i in range(size)] if searches else []

    def _check_unused(self) -> None:
        unused = 0
        checked = False
        for ref in self._models:
            model = ref()
            if model is None or not getattr(model, "find_unused_parameters", False):
                continue
            checked = True
            unused += sum(1 for p in model.parameters() if p.requires_grad and p.grad is None)
        if checked:
            self.info.unused_params = max(self.info.unused_params or 0, unused)

    def time_find_unused(self, start_ns: int, ns: int) -> None:
        """Note time spent in DDP's unused-parameter search after a forward (host clock)."""
        if self.active and len(self._searches) < MAX_EVENTS:
            self._searches.append((start_ns, ns))


class DDPPatches:
    """Class-level patches on DistributedDataParallel that feed a :class:`CommTimer`.

    What the doctor knows about each model is kept here, keyed weakly by the model, never as
    attributes on the user's object (a deepcopy or pickle of the model must not drag it along).
    """

    def __init__(self, timer: CommTimer) -> None:
        self.timer = timer
        self._originals: dict[str, Any] = {}
        self._hooks: "weakref.WeakKeyDictionary[Any, _TimedHook]" = weakref.WeakKeyDictionary()
        self._user: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._builtin: "weakref.WeakSet[Any]" = weakref.WeakSet()

    def install(self) -> None:
        """Patch ``__init__``, ``register_comm_hook``, the built-in registration and ``_post_forward``."""
        originals = self._originals
        originals["init"] = DDP.__init__
        originals["register"] = DDP.register_comm_hook
        originals["builtin"] = getattr(DDP, "_register_builtin_comm_hook", None)
        originals["post_forward"] = getattr(DDP, "_post_forward", None)
        patches = self

        @functools.wraps(originals["init"])
        def init(ddp: Any, *args: Any, **kwargs: Any) -> None:
            originals["init"](ddp, *args, **kwargs)
            patches._adopt(ddp)

        @functools.wraps(originals["register"])
        def register(ddp: Any, state: Any, hook: Callable[..., Any]) -> None:
            patches._register(ddp, state, hook)

        DDP.__init__ = init  # type: ignore[method-assign]
        DDP.register_comm_hook = register  # type: ignore[method-assign]
        if originals["builtin"] is not None:
            @functools.wraps(originals["builtin"])
            def builtin(ddp: Any, comm_hook_type: Any) -> None:
                patches._builtin.add(ddp)
                originals["builtin"](ddp, comm_hook_type)

            DDP._register_builtin_comm_hook = builtin  # type: ignore[attr-defined]
        if originals["post_forward"] is not None:
            @functools.wraps(originals["post_forward"])
            def post_forward(ddp: Any, output: Any) -> Any:
                if not (getattr(ddp, "find_unused_parameters", False) and not getattr(ddp, "static_graph", False)
                        and torch.is_grad_enabled() and getattr(ddp, "require_backward_grad_sync", True)):
                    return originals["post_forward"](ddp, output)
                t0 = time.perf_counter_ns()
                try:
                    return originals["post_forward"](ddp, output)
                finally:
                    patches.timer.time_find_unused(t0, time.perf_counter_ns() - t0)

            DDP._post_forward = post_forward  # type: ignore[attr-defined]

    def uninstall(self) -> None:
        """Restore DDP's methods (hooks already registered on live models stay, inactive)."""
        if not self._originals:
            return
        DDP.__init__ = self._originals.pop("init")  # type: ignore[method-assign]
        DDP.register_comm_hook = self._originals.pop("register")  # type: ignore[method-assign]
        builtin = self._originals.pop("builtin")
        if builtin is not None:
            DDP._register_builtin_comm_hook = builtin  # type: ignore[attr-defined]
        post = self._originals.pop("post_forward")
        if post is not None:
            DDP._post_forward = post  # type: ignore[attr-defined]

    # --- registration ------------------------------------------------------------------------------

    def _adopt(self, ddp: Any) -> None:
        info = self.timer.info
        info.ddp_models += 1
        group = getattr(ddp, "process_group", None)
        if info.backend is None and group is not None:
            try:
                info.backend = str(group.name())
            except (AttributeError, RuntimeError):
                info.backend = None
        info.find_unused_parameters = info.find_unused_parameters or bool(getattr(ddp, "find_unused_parameters", False))
        info.static_graph = info.static_graph or bool(getattr(ddp, "static_graph", False))
        info.ddp_params += sum(p.numel() for p in ddp.parameters() if p.requires_grad)
        self.timer.track(ddp)
        if ddp in self._hooks or ddp in self._builtin:
            return  # a hook was registered inside DDP's own __init__ (mixed precision)
        handle: list[Any] = []

        def first_forward(module: Any, args: Any) -> None:
            handle[0].remove()
            self._install_default(module)

        handle.append(ddp.register_forward_pre_hook(first_forward))

    def _install_default(self, ddp: Any) -> None:
        """Before the first forward: time DDP's all-reduce unless the user registered a hook."""
        if ddp in self._hooks or ddp in self._builtin or getattr(ddp, "_comm_hooks", None):
            return
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        hook = _TimedHook(self.timer, default_hooks.allreduce_hook, getattr(ddp, "process_group", None))
        timed = _hook_function(hook, "allreduce_hook")
        try:
            self._originals["register"](ddp, hook.state, timed)
        except (RuntimeError, ValueError, TypeError) as exc:
            log.info("collective waits not timed for this DDP model: %s", exc)
            hooks = getattr(ddp, "_comm_hooks", None)
            if isinstance(hooks, list) and hooks and hooks[-1][0] is timed:
                hooks.pop()
            return
        self._hooks[ddp] = hook
        self.timer.info.comm_hook = "allreduce (default)"

    def _register(self, ddp: Any, state: Any, user_hook: Callable[..., Any]) -> None:
        """The user registers a hook: wrap it (never replace it), keeping DDP's checks and its name."""
        name = (getattr(user_hook, "__qualname__", None) or getattr(user_hook, "__name__", None)
                or type(user_hook).__name__)
        ours = self._hooks.get(ddp)
        if ours is not None and ddp not in self._user:
            # The timed default went in at the first forward and DDP takes one registration: the
            # user's hook takes the default's place inside the timed wrapper.
            ddp._check_comm_hook(user_hook)
            ours.inner, ours.state = user_hook, state
            self._user.add(ddp)
            if getattr(ddp, "logger", None) is not None:
                ddp.logger._set_comm_hook_name(name)
            self.timer.info.comm_hook = name
            return
        if ours is not None:
            self._originals["register"](ddp, state, user_hook)  # a second registration: DDP's own error
            return
        ddp._check_comm_hook(user_hook)  # a malformed hook fails with DDP's own message, as without us
        hook = _TimedHook(self.timer, user_hook, state)
        self._originals["register"](ddp, state, _hook_function(hook, name))
        self._hooks[ddp] = hook
        self._user.add(ddp)
        self.timer.info.comm_hook = name
