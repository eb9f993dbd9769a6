"""Timing DDP's gradient all-reduce through its communication hook (a one-rank gloo group in-process).

One rank exercises every code path of the hook wrapping (DDP calls the hook with world size 1
too); the wait values across real ranks are checked by the integration tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from stave.capture.session import DoctorOptions, DoctorSession
from stave.device import Mark, StepClock
from stave.dist.comm import CommTimer, DDPPatches, place_by_time
from stave.dist.env import DistEnv
from stave.dist.hooks import DistHooks
from stave.measure.dist import DistInfo
from stave.measure.steps import StepRecord


# DDP as it is without the doctor (read at import, before any test patches it).
_ORIGINAL_INIT = DDP.__init__
_ORIGINAL_REGISTER = DDP.register_comm_hook


@pytest.fixture
def group() -> Iterator[None]:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.fixture
def patched() -> Iterator[tuple[CommTimer, DDPPatches]]:
    clock = StepClock("cpu")
    timer = CommTimer(clock, DistInfo())
    patches = DDPPatches(timer)
    patches.install()
    try:
        yield timer, patches
    finally:
        patches.uninstall()


class TwoHeads(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used = torch.nn.Linear(8, 4)
        self.unused = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


def train(model: torch.nn.Module, steps: int = 3) -> list[torch.Tensor]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        loss = model(torch.randn(16, 8, generator=g)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in model.parameters()]


def test_default_hook_is_timed_and_gives_identical_parameters(group: None, patched: Any) -> None:
    timer, _ = patched
    torch.manual_seed(0)
    plain_params = train(ddp_unpatched(torch.nn.Linear(8, 4)))
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 4))
    timed_params = train(model)
    assert all(torch.equal(a, b) for a, b in zip(plain_params, timed_params))
    assert timer.info.comm_hook == "allreduce (default)" and timer.info.ddp_models == 1
    assert timer.info.comm_buckets >= 3 and timer.rounds_seen == 3
    assert timer.info.backend == "gloo"


def ddp_unpatched(module: torch.nn.Module) -> Any:
    """A DDP model built while the patches are out, as the user's own would be without the doctor."""
    saved = DDP.__init__, DDP.register_comm_hook
    DDP.__init__, DDP.register_comm_hook = _ORIGINAL_INIT, _ORIGINAL_REGISTER  # type: ignore[method-assign]
    try:
        return DDP(module)
    finally:
        DDP.__init__, DDP.register_comm_hook = saved  # type: ignore[method-assign]


def test_user_hook_registered_before_training_is_wrapped_not_replaced(group: None, patched: Any) -> None:
    timer, _ = patched
    calls = []

    # Unannotated, like most users' hooks: DDP rejects string annotations (PEP 563) itself.
    def my_hook(state, bucket):  # type: ignore[no-untyped-def]
        calls.append(bucket.index())
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer())
        return fut

    model = DDP(torch.nn.Linear(8, 4))
    model.register_comm_hook(None, my_hook)
    train(model, steps=2)
    assert calls and timer.info.comm_hook.endswith("my_hook")
    assert model._get_ddp_logging_data()["comm_hook"].endswith("my_hook")  # DDP's own log unchanged
    with pytest.raises(RuntimeError, match="only be called once"):
        model.register_comm_hook(None, my_hook)


def test_user_hook_registered_after_the_first_forward_takes_the_defaults_place(group: None, patched: Any) -> None:
    timer, _ = patched
    calls = []

    def late_hook(state, bucket):  # type: ignore[no-untyped-def]
        calls.append(1)
        return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0])

    model = DDP(torch.nn.Linear(8, 4))
    train(model, steps=1)
    assert timer.info.comm_hook == "allreduce (default)"
    model.register_comm_hook(None, late_hook)
    train(model, steps=2)
    assert len(calls) == 2 and timer.info.comm_hook.endswith("late_hook")


def test_builtin_hook_is_left_alone(group: None, patched: Any) -> None:
    timer, _ = patched
    model = DDP(torch.nn.Linear(8, 4))
    model._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)
    train(model, steps=2)
    assert timer.info.comm_hook is None and timer.info.comm_buckets == 0


def test_unused_parameter_search_is_timed_and_unused_parameters_counted(group: None, patched: Any) -> None:
    timer, _ = patched
    model = DDP(TwoHeads(), find_unused_parameters=True)
    train(model, steps=4)
    assert timer.info.find_unused_parameters and timer.search_ns_total > 0
    assert timer.info.unused_params == 2  # the unused head's weight and bias


def test_uninstall_restores_ddp() -> None:
    before = (DDP.__init__, DDP.register_comm_hook, DDP._post_forward)
    clock = StepClock("cpu")
    patches = DDPPatches(CommTimer(clock, DistInfo()))
    patches.install()
    assert DDP.__init__ is not before[0]
    patches.uninstall()
    assert (DDP.__init__, DDP.register_comm_hook, DDP._post_forward) == before


def test_session_records_comm_waits_per_step(group: None) -> None:
    env = DistEnv(rank=0, local_rank=0, world_size=2, node_rank=0, run_id="t", launch_id="", restart_count=0,
                  source="torchrun")
    session = DoctorSession(DoctorOptions(warmup=0, probes=False, count_flops=False, stacks=False), None,
                            attachments=[DistHooks(env)])
    session.start()
    try:
        train(DDP(torch.nn.Linear(8, 4)), steps=6)
    finally:
        record = session.stop()
    assert record.dist.comm_hook == "allreduce (default)" and record.dist.world_size == 2
    counted = record.counted_steps()
    # Every step, the first (closed only when the second optimizer step came) included.
    assert len(counted) == 6 and all(s.comm_wait_ns > 0 for s in counted)
    assert record.dist.rounds_by_step == [1] * 6
    assert all(s.comm_wait_ns <= s.backward_ns for s in counted)  # the wait happens inside backward


@dataclass
class FakeEvent:
    t_ms: float
    done: bool = False

    def query(self) -> bool:
        return self.done

    def elapsed_time(self, other: "FakeEvent") -> float:
        return other.t_ms - self.t_ms


class FakeGpuClock(StepClock):
    """Marks carry event stand-ins, as on a GPU (no CUDA needed)."""

    def __init__(self) -> None:
        self.use_events = True

    def mark(self) -> Mark:
        return Mark(0, FakeEvent(0.0, done=True))


def test_gpu_waits_wait_for_their_events_and_land_on_their_step() -> None:
    clock = FakeGpuClock()
    timer = CommTimer(clock, DistInfo())
    launch, done = FakeEvent(10.0), FakeEvent(14.0)
    timer._round = [[Mark(150, launch), Mark(160, done)]]
    timer._round_end(requeued=True)
    timer.resolve(final=False)
    steps = [StepRecord(index=0, start_ns=0, end_ns=100), StepRecord(index=1, start_ns=100, end_ns=200)]
    timer.assign(steps)
    assert [s.comm_wait_ns for s in steps] == [0, 0]  # not ready: no sync, nothing read yet
    launch.done = done.done = True
    timer.resolve(final=False)
    timer.assign(steps)
    timer.assign(steps)  # idempotent: periodic records assign again
    assert [s.comm_wait_ns for s in steps] == [0, 4_000_000]  # the step whose host time holds it
    assert timer.info.rounds_by_step == [0, 1]


def test_events_are_placed_by_host_time() -> None:
    steps = [StepRecord(index=3, start_ns=10, end_ns=20), StepRecord(index=4, start_ns=20, end_ns=30)]
    placed = place_by_time([(5, 1), (10, 2), (19, 3), (20, 4), (29, 5), (30, 6)], steps)
    assert placed == {3: (2, 5), 4: (2, 9)}  # before the first step and after the last: left out


def _two_rank_training(timed: bool) -> list[list[torch.Tensor]]:
    """Two ranks as two threads of this process (each with its own gloo group); returns their params."""
    import threading

    import copy

    store = dist.HashStore()
    torch.manual_seed(0)  # one initial model for both runs (threads would interleave the global RNG)
    initial = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    out: list[list[torch.Tensor]] = [[], []]
    errors: list[BaseException] = []

    def rank(r: int) -> None:
        try:
            # A two-member gloo group without the global default group (torch 2.x's own layering).
            pg = dist.ProcessGroup(store, r, 2)
            pg._set_default_backend(dist.ProcessGroup.BackendType.GLOO)
            pg._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO,
                                 dist.ProcessGroupGloo(store, r, 2))
            model = DDP(copy.deepcopy(initial), process_group=pg, bucket_cap_mb=0.0001)  # several buckets
            if timed:
                clock = StepClock("cpu")
                patches = DDPPatches(CommTimer(clock, DistInfo()))
                patches._originals["register"] = _ORIGINAL_REGISTER  # as install() would, without the class patch
                patches._install_default(model)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            g = torch.Generator().manual_seed(100 + r)  # different data per rank: the average matters
            for _ in range(4):
                model(torch.randn(8, 8, generator=g)).square().mean().backward()
                opt.step()
                opt.zero_grad()
            out[r] = [p.detach().clone() for p in model.parameters()]
        except BaseException as exc:  # reported by the caller, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return out


def test_timed_default_hook_gives_bitwise_identical_two_rank_training() -> None:
    plain, timed = _two_rank_training(timed=False), _two_rank_training(timed=True)
    assert all(torch.equal(a, b) for a, b in zip(plain[0], plain[1]))  # the ranks agree
    assert all(torch.equal(a, b) for a, b in zip(plain[0], timed[0]))  # and the doctor changed nothing
