"""OPTIMIZER_UNFUSED: the optimizer updates one parameter tensor at a time, and that is a large share of the step.

``torch.optim`` runs Adam/AdamW/SGD/Adagrad three ways: a Python loop issuing ~10 small ops per
parameter tensor (``foreach=False``, and the default on CPU), horizontally fused ``_foreach_*`` ops
(the default on CUDA), or one fused kernel per parameter group (``fused=True``, CPU and CUDA). A
model of many small tensors (transformers: a weight, a bias and two norm tensors per layer) pays
the per-op dispatch for each. The estimate comes from the probe (monitor/optimizer_probe.py): the
run's implementation against the others on tensors of the run's own sizes, here; the fastest one
is the fix, and where none is faster there is no finding. Without the probe, the optimizer's
counted ops at the measured per-op cost are the part a fused update removes.
"""

from __future__ import annotations

from stave.analyze.step_inputs import step_inputs
from stave.analyze.step_model import estimate, phase_s, step_time, without_phase_time
from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.inputs import DoctorInput
from stave.diagnose.rules._helpers import REPORT_MIN_SPEEDUP, at_free_cores, is_gpu, make_finding, saving_speedup
from stave.measure.config import FUSED_OPTIMIZERS as FUSED_TYPES
from stave.measure.config import OptimizerInfo
from stave.measure.record import RunRecord
# A fused update still reads and writes every parameter and its state: at least this share of the
# optimizer's time stays (the memory traffic no implementation avoids).
MIN_TIME_LEFT = 0.2
# Ops a fused update issues per parameter group (the kernel, the step counter, a few bookkeeping ops).
FUSED_OPS_PER_GROUP = 4


def best_implementation(fused_ratio: float | None, foreach_ratio: float | None) -> tuple[str, float] | None:
    """The probed implementation that beats the run's own by most, and its ratio (None: none probed).

    Fused wins ties: it issues fewer ops, so it loses less to a busier host."""
    probed = [(r, name) for name, r in (("fused", fused_ratio), ("foreach", foreach_ratio)) if r is not None]
    if not probed:
        return None
    ratio, name = max(probed, key=lambda p: (p[0], p[1] == "fused"))
    return name, ratio


def is_unfused(opt: OptimizerInfo, gpu: bool) -> bool:
    """True when ``opt`` updates tensor by tensor, or with foreach where fused is available on a GPU."""
    if opt.type not in FUSED_TYPES or opt.fused:
        return False
    if opt.foreach is False:
        return True
    # foreach=None means foreach on CUDA and the per-tensor loop on CPU.
    return not gpu or opt.foreach in (None, True)


def probed_optimizer_s(optimizer_s: float, fused_ratio: float) -> float:
    """Optimizer seconds with a fused update, from the probe's measured loop/fused ratio."""
    return max(optimizer_s / max(fused_ratio, 1.0), optimizer_s * MIN_TIME_LEFT)


def fused_optimizer_s(optimizer_s: float, optimizer_ops: int, groups: int, op_overhead_s: float) -> float:
    """Optimizer seconds with a fused update: the per-op dispatch of the ops it no longer issues removed,
    never below :data:`MIN_TIME_LEFT` of the measured time."""
    removed_ops = max(0, optimizer_ops - FUSED_OPS_PER_GROUP * max(1, groups))
    return max(optimizer_s - removed_ops * op_overhead_s, optimizer_s * MIN_TIME_LEFT)


def probe_own_step_s(record: RunRecord, opt: OptimizerInfo) -> float | None:
    """The optimizer probe's time for the run's own implementation, at the run's values: the probe's
    median step scaled by the run's values over the probe's where the probe was capped
    (:data:`~stave.monitor.optimizer_probe.MAX_PROBE_VALUES`; the memory traffic grows with the
    values, the per-tensor cost does not, so this over-states the time, never under-states it)."""
    own_s = record.probes.optimizer_own_step_s
    probe = record.probes.optimizer_probe
    if own_s is None or len(probe) < 2 or probe[1] <= 0:
        return None
    return own_s * max(1.0, opt.params / probe[1])


def busy_priced(inp: DoctorInput, opt: OptimizerInfo, ratio: float | None) -> tuple[float, float, float] | None:
    """Beside other busy processes, the fix priced on the step at the free cores: (estimate, the
    optimizer's seconds there, with the fix). ``None`` where the run was not beside them, or the
    probe did not time the run's own implementation at the free cores.

    There every op of a per-tensor loop waits at the pool's barrier for the thread that lost its
    core to them: ten waits a tensor, where a fused call waits once. The run's optimizer phase
    carries those waits (python_token_loop: 130 ms a step beside a busy loop, 3.6 ms alone), which
    are MACHINE_BUSY's, and priced on it the fix took their share of the step (a healthy nanoGPT
    loop got OPTIMIZER_UNFUSED 1.16x). The probe timed the run's own implementation on tensors of
    its sizes at the free cores, beside them, so that is the optimizer's time there; the rest of
    the step is the step at the free cores (:func:`at_free_cores`).
    """
    record = inp.record
    threads = record.config.torch_threads or record.config.cores_usable
    if ratio is None or record.probes.optimizer_probe_threads is None or not threads \
            or record.probes.optimizer_probe_threads >= threads:
        return None
    free = at_free_cores(inp)
    own_s = probe_own_step_s(record, opt)
    model = step_inputs(free.record, free.summary) if free is not inp else None
    if model is None or own_s is None:
        return None
    phase = model.phases_s.get("optimizer", 0.0)
    opt_s = min(phase, own_s)
    new_opt_s = probed_optimizer_s(opt_s, ratio)
    before = without_phase_time(model, {"optimizer": phase - opt_s})
    after = without_phase_time(before, {"optimizer": opt_s - new_opt_s})
    return estimate(before, after, step_time(before).step_s), opt_s, new_opt_s


@rule("OPTIMIZER_UNFUSED", kind="doctor")
def optimizer_unfused(inp: DoctorInput) -> Finding | None:
    """The optimizer is a large share of the step and a fused implementation would shrink it."""
    record, summary = inp.record, inp.summary
    t = summary.step_time_median_s
    if summary.steps == 0 or t <= 0:
        return None
    gpu = is_gpu(record)
    cfg = record.config
    unfused = [o for o in cfg.optimizers if is_unfused(o, gpu)]
    share = summary.breakdown.get("optimizer", 0.0)
    overhead_ns = record.probes.op_overhead_ns
    best = best_implementation(record.probes.optimizer_fused_ratio, record.probes.optimizer_foreach_ratio)
    impl, ratio = best if best is not None else ("fused", None)
    ops = cfg.aten_ops_by_phase.get("optimizer", 0)
    # No floor on the optimizer's share: what the fix buys is the estimate (its measured time over the
    # probe's ratio), held to the report bar like every finding's. A share floor of a tenth hid an
    # AdamW at 8.7 % of an accelerate loop's step whose fused=True measured 1.08x.
    if not unfused:
        return None
    opt_s = phase_s(summary, "optimizer")
    tensors = sum(o.param_tensors for o in cfg.optimizers)
    if ratio is not None:
        new_opt_s = probed_optimizer_s(opt_s, ratio)
    elif overhead_ns and ops:
        new_opt_s = fused_optimizer_s(opt_s, ops, len(cfg.optimizers), overhead_ns / 1e9)
    else:
        return None
    est = saving_speedup(inp, {"optimizer": opt_s - new_opt_s}, t)
    opt = unfused[0]
    # The probe rebuilt the optimizer with the most parameters (capture/session.py).
    busy = busy_priced(inp, max(cfg.optimizers, key=lambda o: o.params), ratio)
    if busy is not None:
        est = busy[0]
    if est < REPORT_MIN_SPEEDUP:
        return None
    mode = "foreach" if opt.foreach or (gpu and opt.foreach is None) else "a per-tensor loop"
    return make_finding(
        "OPTIMIZER_UNFUSED",
        est,
        f"{opt.type} takes {share:.0%} of the step updating {opt.param_tensors} tensors with {mode}"
        + (f"; {impl}=True measured {ratio:.2f}x faster here" if ratio is not None else
           f"; {ops} ops per step at {(overhead_ns or 0) / 1e3:.1f} us each"),
        {
            "optimizer_type": opt.type,
            "foreach": opt.foreach,
            "fused": opt.fused,
            "param_tensors": tensors,
            "optimizer_share": share,
            "optimizer_s": opt_s,
            "optimizer_s_per_tensor": opt_s / tensors if tensors else None,
            "aten_ops_in_optimizer": ops,
            "op_overhead_ns": overhead_ns,
            "fused_optimizer_s": new_opt_s,
            "best_implementation": impl,
            "probe_fused_ratio": record.probes.optimizer_fused_ratio,
            "probe_foreach_ratio": record.probes.optimizer_foreach_ratio,
            "probe_tensors_values": record.probes.optimizer_probe,
            "probe_threads": record.probes.optimizer_probe_threads,
            "probe_own_step_s": record.probes.optimizer_own_step_s,
            "optimizer_s_at_free_cores": busy[1] if busy is not None else None,
            "fused_optimizer_s_at_free_cores": busy[2] if busy is not None else None,
        },
        f"optimizer = torch.optim.{opt.type}(model.parameters(), lr=lr, {impl}=True)  # "
        + ("one kernel per group" if impl == "fused" else "one op per step over all tensors"),
        explanation=(
            "Estimate: the optimizer's measured time divided by the probe's ratio of the run's "
            "implementation to the fastest other one (tensors of the run's own sizes, this machine); "
            "without the probe, its counted ops beyond a few per parameter "
            f"group at the measured per-op cost removed. At least {MIN_TIME_LEFT:.0%} of it stays: the "
            "update still reads and writes every parameter and its state."
        ),
    )
