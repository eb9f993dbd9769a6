"""PYTHON_OVERHEAD: the step spends its time in the user's Python, outside model, loader and optimizer.

``other`` is the part of the step no measured phase covers: a loss computed element by element in
a Python loop, metrics, logging. When it is a large share of the typical step, the stack samples
name the lines. Each tensor op issued from such a loop pays a fixed dispatch cost, and each
differentiable one adds an autograd node that backward replays one by one (a per-sample slice's
node even builds a full-size gradient); whole-tensor ops pay that once.

Only Python that is really in the loop is named: a line whose time is spent inside a library call
doing real C++ work (``clip_grad_norm_`` over large gradients: ops costing many dispatches each)
is left out, and so is a line of whole-tensor ops outside any loop (``x = x.float()`` of a large
batch) when the ops do such work. A line outside any loop is named only where its fix removes
its time (:func:`removable_line`): logging every step, or a read-back that synchronizes a GPU. A
loss or a metric computed once per step costs its ops' time, which no rewrite of its Python
removes. The fix is chosen from the source at the named line (a per-element loop, a read-back
such as ``.item()``, logging, or other per-step Python).
"""

from __future__ import annotations

import re

from stave.analyze.hotlines import HotLine, hot_lines, library_share, source_context
from stave.analyze.outliers import find_outliers
from stave.analyze.step_model import phase_s
from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.inputs import DoctorInput
from stave.diagnose.rules._helpers import (BOOKKEEPING_OPS_MAX, LINE_MIN_SHARE, MIN_STACK_SAMPLES, REPORT_MIN_SPEEDUP,
                                           at_free_cores, counted_indices, is_gpu, loop_over_batch, make_finding,
                                           micro_batches, saving_speedup)

# The loop's Python and the backward work it causes take at least this share of the step (the
# issue's bound for the 'other' part of an honest breakdown); below it they are the loop's own
# bookkeeping (iteration, a few scalar ops), not something to rewrite.
MIN_SHARE = 0.15
# Backward replays each node forward recorded as one to three ops (a linear layer's two matmuls
# and a sum, an activation's one): a model's own backward issues at most this many ops per op of
# its forward, so backward ops beyond that are nodes recorded outside the model's forward.
BACKWARD_OPS_PER_FORWARD_OP = 3
# A line whose samples are mostly inside library code is a library call, not Python in the loop,
# when the ops in ``other`` each cost this many bare dispatches or more: they do real work in C++
# (a gradient norm over large tensors), which rewriting the line's Python would not shorten.
LIBRARY_MIN_SHARE = 0.5
LIBRARY_OP_DISPATCHES = 5.0


def ops_do_work(other_s: float, other_ops: int | None, op_overhead_ns: float | None) -> bool:
    """True when the ops issued in ``other`` each cost many dispatches: their time is C++ work."""
    if not other_ops or not op_overhead_ns:
        return False
    return other_s * 1e9 / other_ops >= LIBRARY_OP_DISPATCHES * op_overhead_ns


READBACK_CALLS = (".item()", ".cpu()", ".tolist()", ".numpy()")
# A call that prints or logs: print(...), self.log(...), logger.info(...), wandb.log(...),
# writer.add_scalar(...). A bare "log" substring would match logits and log_softmax.
LOG_CALL = re.compile(r"\b(print|log|log_dict|info|debug|add_scalars?)\s*\(")


def logs(source: str) -> bool:
    """Whether the line prints or logs."""
    return bool(LOG_CALL.search(source))


def removable_line(source: str, in_loop: bool, gpu: bool, other_ops: float) -> bool:
    """Whether rewriting a hot line's Python removes its time: a per-element loop (a ``for``/``while``
    body, or a comprehension or generator on the line), a call that loops inside (``other_ops``, the
    ops issued between the phases per micro-batch, beyond what a loss and metrics issue:
    ``clip_grad_norm_`` over thousands of tensors one by one), a print or log every step (log every
    N steps), or a read-back that synchronizes a GPU. Outside any loop a line that computes a loss
    or a metric once per step costs its ops' time, which no rewrite removes, and on a CPU a
    read-back waits for nothing: pytorch/examples' polynomial fit had 43 % of its 0.3 ms of Python
    at ``output = F.smooth_l1_loss(fc(x), y); loss = output.item()`` (18 ops), priced as removable
    at 2.1x. An unreadable source is kept (the line cannot be judged)."""
    if not source or in_loop or " for " in source or logs(source) or other_ops > BOOKKEEPING_OPS_MAX:
        return True
    return gpu and any(call in source for call in READBACK_CALLS)


def is_whole_tensor_line(source: str, in_loop: bool) -> bool:
    """A line outside any per-element loop that neither reads a tensor back nor logs: whole-tensor
    ops (``x = x.float()``), whose time is the ops' C++ work when the ops do work."""
    return bool(source) and not in_loop and not any(c in source for c in READBACK_CALLS) and not logs(source)


def line_fix(label: str, source: str, in_loop: bool) -> str:
    """A fix that fits the code at the hot line: its text and whether a per-element loop encloses it."""
    head = f"# {label}: {source}" if source else f"# {label}"
    if in_loop or not source:
        return f"""{head}
# replace the per-element Python loop with whole-tensor ops, e.g.
#   for i in range(len(y)): loss = loss + F.cross_entropy(out[i:i+1], y[i:i+1])
# becomes
loss = F.cross_entropy(out, y, reduction="sum")
# (or wrap the function in torch.compile when it cannot be written with batched ops)"""
    if any(call in source for call in READBACK_CALLS):
        return f"""{head}
# reads a tensor back every step: keep the running value on the device, read it every N steps
running = running + loss.detach()
if step % 100 == 0:
    print(running.item() / 100); running.zero_()"""
    if logs(source):
        return f"""{head}
# logs every step: log every N steps
if step % 100 == 0:
    {source}"""
    return f"""{head}
# this line's Python runs every step: move it out of the step, do it every N steps, or fuse it
step_fn = torch.compile(step_fn)  # the function the line calls, when it is tensor code"""


def _backward_replay_s(inp: DoctorInput, hot_share: float) -> float | None:
    """Backward time spent replaying the autograd nodes the hot lines recorded, or None if unknown.

    Backward time is FLOP work (the counted matmul/conv FLOPs of backward at the probe's fp32 rate)
    plus per-op work. The model's own forward explains at most :data:`BACKWARD_OPS_PER_FORWARD_OP`
    backward ops per forward op; the ops beyond, up to one per op the loop issued, replay nodes the
    loop recorded (none when it ran under ``no_grad``), and take their share of the per-op work.
    """
    record, summary = inp.record, inp.summary
    ops = record.config.aten_ops_by_phase
    loop_ops = ops.get("other", 0)
    backward_ops = ops.get("backward", 0)
    rate = record.probes.matmul_flops_per_s or record.probes.fp32_matmul_flops_per_s
    if not loop_ops or not rate or backward_ops <= 0:
        return None
    loop_nodes = min(loop_ops, max(0, backward_ops - BACKWARD_OPS_PER_FORWARD_OP * ops.get("forward", 0)))
    # The median backward, as 'other' is the median: a phase's share of the median step would shrink
    # it by whatever a stall elsewhere (one 170 ms step in 'other') adds to the mean step.
    backward = summary.phase_median_s.get("backward", phase_s(summary, "backward"))
    flop_time = record.config.flops_by_phase.get("backward", 0) / rate
    per_op = max(0.0, backward - flop_time) / backward_ops
    return per_op * loop_nodes * hot_share


def _op_work_s(inp: DoctorInput) -> float:
    """Seconds of 'other' spent doing work inside torch ops, which whole-tensor ops do not remove.

    On a CPU the FLOP-counting step timed the ops that ran in 'other' (a cast of a large batch, its
    first touch of a worker's shared memory). What each op costs up to LIBRARY_OP_DISPATCHES bare
    dispatches stays the loop's: a loop of thousands of tiny ops is exactly what whole-tensor ops
    remove.
    """
    cfg, overhead_ns = inp.record.config, inp.record.probes.op_overhead_ns
    in_ops = sum(cfg.op_s_by_phase.get("other", {}).values())
    if in_ops <= 0 or not overhead_ns:
        return 0.0
    ops = cfg.aten_ops_by_phase.get("other", 0)
    return max(0.0, in_ops - ops * LIBRARY_OP_DISPATCHES * overhead_ns / 1e9)


def own_step_s(inp: DoctorInput) -> float:
    """The median step that :data:`MIN_SHARE` is a share of: beside busy processes that left fewer
    free cores than the pool's threads, the step with the pool at the free cores as MACHINE_BUSY's
    probe measured it (:func:`at_free_cores`; a quiet machine at least matches it), since the
    measured step carries their barrier waits, which no rewrite of the loop removes; elsewhere the
    measured median."""
    t = inp.summary.step_time_median_s
    return min(t, at_free_cores(inp).summary.step_time_median_s) or t


def _unattributed(inp: DoctorInput, other: float, samples: int) -> Finding | None:
    """The finding from timing alone, when the run was too short for the stacks to name a line.

    Only the measured 'other' time counts: without lines, the backward replay cannot be tied to
    the loop, so the estimate is the lower bound. Too short a run should still say that a large
    share of the step is unaccounted Python, and how to get the lines.
    """
    t = inp.summary.step_time_median_s
    in_ops = _op_work_s(inp)
    other = max(0.0, other - in_ops)
    # Without lines, the op counts can still show a loop over the batch's elements; the backward
    # replay of the nodes it recorded is then the loop's too.
    replay = (_backward_replay_s(inp, 1.0) or 0.0) if loop_over_batch(inp) else 0.0
    if (other + replay) / own_step_s(inp) < MIN_SHARE:
        return None
    est = saving_speedup(inp, {"other": other, "backward": replay}, t)
    if est < REPORT_MIN_SPEEDUP:
        return None
    return make_finding(
        "PYTHON_OVERHEAD",
        est,
        f"{other / t:.0%} of the step is Python outside the model, loader and optimizer; the run was "
        f"too short to name the lines ({samples} stack samples there)",
        {
            "step_time_s": t,
            "other_s": other,
            "other_share": other / t,
            "stack_samples_in_other": samples,
            "min_stack_samples": MIN_STACK_SAMPLES,
            "aten_ops_in_other": inp.record.config.aten_ops_by_phase.get("other"),
            "op_work_s_in_other": in_ops,
            "backward_replay_s": replay,
        },
        """# Run longer to see which lines hold the time (the table of hot lines, or the flame graph):
#   stave doctor --steps 200 --flamegraph stacks.txt train.py
# then replace per-element Python loops in the step with whole-tensor ops, e.g.
loss = F.cross_entropy(out, y, reduction="sum")  # not one cross_entropy per sample""",
        explanation=(
            "Estimate: the median 'other' time outside torch ops removed, plus the backward replay of the nodes a loop "
            "over the batch recorded where the op counts show one (at least one op per sample, more "
            "than bookkeeping issues)."
        ),
    )


@rule("PYTHON_OVERHEAD", kind="doctor")
def python_overhead(inp: DoctorInput) -> Finding | None:
    """Much of the typical step is the user's Python outside the measured phases."""
    record, summary = inp.record, inp.summary
    t = summary.step_time_median_s
    if summary.steps == 0 or t <= 0:
        return None
    # Medians, so occasional stalls (checkpoints: STEP_OUTLIERS) do not make up a Python problem.
    other = min(summary.phase_median_s.get("other", 0.0), t)
    slow = set(find_outliers(record.steps).indices)
    steps = [i for i in counted_indices(record) if i not in slow]
    samples = record.stacks.sample_count(steps, "other")
    if samples < MIN_STACK_SAMPLES:
        return _unattributed(inp, other, samples)
    lines = [h for h in hot_lines(record.stacks, steps, "other", limit=3) if h.share >= LINE_MIN_SHARE]
    if ops_do_work(other, record.config.aten_ops_by_phase.get("other"), record.probes.op_overhead_ns):
        # Library calls doing real work (clip_grad_norm_ over large gradients) are not Python overhead,
        # and neither is a whole-tensor op written in the loop (a cast of a large batch).
        lines = [h for h in lines
                 if library_share(record.stacks, h.file, h.line, steps, "other") < LIBRARY_MIN_SHARE
                 and not is_whole_tensor_line(*source_context(h.file, h.line))]
    other_ops = record.config.aten_ops_by_phase.get("other", 0) / micro_batches(record)
    lines = [h for h in lines if removable_line(*source_context(h.file, h.line), gpu=is_gpu(record),
                                                other_ops=other_ops)]
    if not lines:
        return None
    hot_share = min(1.0, sum(h.share for h in lines))
    top: HotLine = lines[0]
    source, in_loop = source_context(top.file, top.line)
    if in_loop and loop_over_batch(inp):
        # The op counts show a loop over the batch's elements and the line is in it: rewriting the
        # loop removes every per-sample op and node, which the exact op counts measure better than
        # the line's share of a few tens of stack samples (off by 15% either way at the minimum).
        saved_other = max(other * hot_share, other - _op_work_s(inp))
        replay = _backward_replay_s(inp, 1.0)
    else:
        saved_other = other * hot_share
        replay = _backward_replay_s(inp, hot_share)
    saved = saved_other + (replay or 0.0)
    # Beside other busy processes, a share of the job's own step (the waits they caused are theirs).
    own_t = own_step_s(inp)
    if saved / own_t < MIN_SHARE:
        return None
    evidence: dict[str, object] = {
        "step_time_s": t,
        "own_step_time_s": own_t,
        "other_s": other,
        "other_share": other / t,
        "hot_lines": {h.label: h.share for h in lines},
        "hot_lines_share_of_other": hot_share,
        "aten_ops_in_other": record.config.aten_ops_by_phase.get("other"),
        "aten_ops_in_forward": record.config.aten_ops_by_phase.get("forward"),
        "backward_replay_s": replay,
    }
    evidence["python_s_removed"] = saved_other
    est = saving_speedup(inp, {"other": saved_other, "backward": replay or 0.0}, t)
    if est < REPORT_MIN_SPEEDUP:
        return None
    evidence["hot_line_source"] = source
    evidence["hot_line_in_inner_loop"] = in_loop
    return make_finding(
        "PYTHON_OVERHEAD",
        est,
        f"{saved / t:.0%} of the step is Python outside the model and the backward it causes; "
        f"{top.share:.0%} of that Python at {top.label} ({top.function})",
        evidence,
        line_fix(top.label, source, in_loop),
        explanation=(
            "Estimate: the median 'other' time at the hot lines removed (all of it outside torch ops' work "
            "when the op counts show a loop over the batch and the line is in it), plus the backward replay "
            "of the autograd nodes those lines recorded (backward's non-FLOP time split by op counts)."
        ),
        lines=[h.label for h in lines],
    )
