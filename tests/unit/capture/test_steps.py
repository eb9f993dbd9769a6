"""StepTracker: phases are exclusive and additive; steps close at the end of an optimizer cycle."""

from __future__ import annotations

from stave.capture.steps import StepTracker
from fake_clock import FakeClock


def _one_step(tr: StepTracker, opt_ids: list[int], samples: int = 8) -> None:
    owned = tr.enter("data_wait")
    tr.add_to_active(samples=samples)
    tr.exit(owned)
    owned = tr.enter("forward")
    nested = tr.enter("h2d")  # a copy inside forward stays forward
    assert nested is False
    tr.exit(nested)
    tr.exit(owned)
    owned = tr.enter("backward")
    tr.exit(owned)
    tr.grads_accumulated()
    for oid in opt_ids:
        tr.optimizer_pre(oid)
        owned = tr.enter("optimizer")
        tr.exit(owned)
        tr.optimizer_post(oid)


def test_single_optimizer_steps_close_and_phases_add_up() -> None:
    tr = StepTracker(FakeClock())
    for _ in range(4):
        _one_step(tr, [1])
    tr.finish()
    # The first step closes when the optimizer steps again; the 4th closes at its own post hook.
    assert [s.index for s in tr.steps] == [0, 1, 2, 3]
    for s in tr.steps:
        measured = s.data_wait_ns + s.h2d_ns + s.forward_ns + s.backward_ns + s.optimizer_ns
        assert measured + s.other_ns == s.duration_ns
        assert s.samples == 8
        assert s.forward_calls == 1 and s.backward_calls == 1
        assert s.h2d_ns == 0


def test_two_optimizers_make_one_step_per_cycle() -> None:
    tr = StepTracker(FakeClock())
    for _ in range(3):
        _one_step(tr, [1, 2])  # e.g. a GAN: discriminator then generator
    tr.finish()
    assert len(tr.steps) == 3
    assert all(s.samples == 8 for s in tr.steps)


def test_gradient_accumulation_counts_every_microbatch() -> None:
    tr = StepTracker(FakeClock())
    for _ in range(3):
        for _micro in range(4):
            owned = tr.enter("data_wait")
            tr.add_to_active(samples=2)
            tr.exit(owned)
            owned = tr.enter("forward")
            tr.exit(owned)
            owned = tr.enter("backward")
            tr.exit(owned)
        tr.optimizer_pre(7)
        tr.optimizer_post(7)
    tr.finish()
    assert [s.samples for s in tr.steps] == [8, 8, 8]
    assert all(s.forward_calls == 4 and s.data_fetches == 4 for s in tr.steps)


def test_on_step_end_and_classification() -> None:
    tr = StepTracker(FakeClock())
    seen: list[int] = []
    tr.on_step_end = seen.append
    tr.classify = lambda i: (i < 2, False, i == 1)
    for _ in range(5):
        _one_step(tr, [1])
    tr.finish()
    assert seen == [0, 1, 2, 3, 4]
    assert [s.warmup for s in tr.steps] == [True, True, False, False, False]
    assert [s.counted for s in tr.steps] == [False, False, True, True, True]


def test_other_threads_do_not_open_phases() -> None:
    import threading

    tr = StepTracker(FakeClock())
    result: list[bool] = []
    t = threading.Thread(target=lambda: result.append(tr.enter("forward")))
    t.start()
    t.join()
    assert result == [False]
    assert tr.active is None


def test_a_closure_inside_optimizer_step_counts_as_forward_and_backward() -> None:
    # optimizer.step(closure): LBFGS, and Lightning's automatic optimization.
    tr = StepTracker(FakeClock())
    for _ in range(3):
        tr.optimizer_pre(1)
        opt = tr.enter("optimizer")
        assert tr.enter("optimizer") is False  # zero_grad inside the closure stays in the step
        for _evaluation in range(2):  # LBFGS evaluates the closure more than once
            fwd = tr.enter("forward")
            assert fwd is True and tr.active == "forward"
            assert tr.enter("backward") is False  # nothing nests inside the closure's phases
            tr.exit(fwd)
            assert tr.active == "optimizer"
            bwd = tr.enter("backward")
            tr.exit(bwd)
        tr.exit(opt)
        assert tr.active is None
        tr.optimizer_post(1)
    tr.finish()
    assert len(tr.steps) == 3
    for s in tr.steps:
        assert s.forward_calls == 2 and s.backward_calls == 2
        assert s.forward_ns > 0 and s.backward_ns > 0 and s.optimizer_ns > 0
        measured = s.data_wait_ns + s.h2d_ns + s.forward_ns + s.backward_ns + s.optimizer_ns
        assert measured + s.other_ns == s.duration_ns


def test_only_forward_and_backward_interrupt_the_optimizer() -> None:
    tr = StepTracker(FakeClock())
    opt = tr.enter("optimizer")
    assert tr.enter("data_wait") is False and tr.enter("h2d") is False
    assert tr.active == "optimizer"
    tr.exit(opt)
    fwd = tr.enter("forward")
    assert tr.enter("backward") is False  # forward is not interruptible
    tr.exit(fwd)


def test_each_step_reads_the_resident_memory_it_ends_with() -> None:
    """Every closed step carries the process's RSS at its end (Linux procfs), and a buffer kept
    alive across steps shows up in it."""
    import mmap
    import sys

    import pytest

    if not sys.platform.startswith("linux"):
        pytest.skip("/proc/self/statm is Linux's")
    tr = StepTracker(FakeClock())
    kept = []
    for _ in range(3):
        _one_step(tr, [1])
        # 16 MiB of fresh anonymous pages, written so they are resident (a heap allocation could
        # reuse pages an earlier test freed, already resident).
        buf = mmap.mmap(-1, 16 * 2**20)
        buf.write(b"x" * len(buf))
        kept.append(buf)
    tr.finish()
    rss = [s.rss_bytes for s in tr.steps]
    assert all(r > 0 for r in rss)
    assert rss[-1] - rss[0] >= 12 * 2**20  # a later step ends with at least one more 16 MiB buffer


def _burn_cpu(seconds: float) -> None:
    import time

    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_each_step_reads_the_process_cpu_of_the_step_and_of_its_data_waits() -> None:
    """A step's ``cpu_ns`` is the process's CPU over the step, ``data_wait_cpu_ns`` the part spent
    in its data waits: CPU burnt while waiting for a batch is not the compute's."""
    tr = StepTracker(FakeClock())
    for _ in range(3):
        owned = tr.enter("data_wait")
        _burn_cpu(0.03)
        tr.exit(owned)
        owned = tr.enter("forward")
        _burn_cpu(0.01)
        tr.exit(owned)
        tr.optimizer_pre(1)
        owned = tr.enter("optimizer")
        tr.exit(owned)
        tr.optimizer_post(1)
    tr.finish()
    assert len(tr.steps) >= 2
    for step in tr.steps[1:]:
        assert 0.03e9 <= step.data_wait_cpu_ns < 0.08e9
        assert step.cpu_ns - step.data_wait_cpu_ns >= 0.01e9
        assert step.cpu_ns < 0.2e9


def test_each_step_counts_the_frames_torch_compile_compiled_in_it(monkeypatch) -> None:
    from stave.capture import steps as steps_module

    # Dynamo not imported when the tracker starts (None), then 3 frames in step 0, none in step
    # 1, 2 in step 2.
    readings = iter([None, 3, 3, 5])
    monkeypatch.setattr(steps_module, "frames_total", lambda: next(readings))
    tr = StepTracker(FakeClock())
    for _ in range(3):
        _one_step(tr, [1])
    tr.finish()
    assert [s.compiled_frames for s in tr.steps] == [3, 0, 2]


def _manual_update(tr: StepTracker, micro: int = 1) -> None:
    """zero_grad, then ``micro`` forward/backward pairs, then a hand-written update (no optimizer)."""
    tr.grads_zeroed()
    tr.exit(tr.enter("optimizer"))
    for _ in range(micro):
        owned = tr.enter("data_wait")
        tr.add_to_active(samples=4)
        tr.exit(owned)
        tr.exit(tr.enter("forward"))
        tr.exit(tr.enter("backward"))
        tr.grads_accumulated()  # loss.backward() returned


def test_a_hand_written_update_is_stepped_at_the_zero_grad_after_its_backwards() -> None:
    tr = StepTracker(FakeClock())
    for _ in range(4):
        _manual_update(tr, micro=3)
    tr.grads_zeroed()  # the loop's next iteration
    tr.finish()
    assert len(tr.steps) == 4 and tr.manual_steps == 4
    # Every micro-batch's samples and backward belong to its update's step.
    assert all(s.samples == 12 and s.backward_calls == 3 for s in tr.steps)


def test_zero_grad_is_no_boundary_once_an_optimizer_steps() -> None:
    # zero_grad before backward and step (the usual order) never closes a step; nor does one after a
    # step, or inside optimizer.step(closure) (a phase is open there).
    tr = StepTracker(FakeClock())
    for _ in range(3):
        tr.grads_zeroed()
        tr.exit(tr.enter("optimizer"))
        _one_step(tr, [1])
    tr.grads_zeroed()
    tr.finish()
    assert [s.index for s in tr.steps] == [0, 1, 2] and tr.manual_steps == 0


def test_autograd_grad_alone_is_no_update() -> None:
    # A gradient penalty's autograd.grad (a backward phase, gradients returned, not accumulated)
    # before the first optimizer's zero_grad: WGAN-GP's critic step.
    tr = StepTracker(FakeClock())
    for _ in range(3):
        tr.exit(tr.enter("forward"))
        tr.exit(tr.enter("backward"))  # autograd.grad
        tr.grads_zeroed()
        tr.exit(tr.enter("optimizer"))
        _one_step(tr, [1])
    tr.finish()
    assert len(tr.steps) == 3 and tr.manual_steps == 0


def test_zero_grad_before_any_backward_is_no_boundary() -> None:
    tr = StepTracker(FakeClock())
    for _ in range(3):
        tr.grads_zeroed()
        tr.exit(tr.enter("forward"))  # inference with gradients cleared: no backward, no step
    tr.finish()
    assert tr.steps == [] and tr.manual_steps == 0
