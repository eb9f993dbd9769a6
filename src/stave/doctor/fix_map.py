"""Which injectable fix verifies a finding, with parameters read from the finding's own evidence.

The table :data:`FIX_MAP` is data: finding ID -> a function of the finding that returns the fixes
(:mod:`stave.inject` units and parameters) or the reason the finding cannot be verified without a
code change. A finding ID absent from the table is "not verifiable without code change".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from stave.diagnose.finding import Finding
from stave.errors import UsageError
from stave.inject.selection import FixRequest, request

NOT_VERIFIABLE = "not verifiable without code change"


@dataclass(frozen=True)
class FixPlan:
    """The fixes that verify one finding, or why there are none (``reason``).

    ``statistic``: what the runs compare: "step_s" (median step time), "mean_step_s" (mean step
    time, for costs that come once per epoch or in bursts: worker start-up, loading stalls; the
    findings' own estimates use the mean there) or "samples_per_s" (when the fix changes the batch). ``changes_learning``: the plan changes what is
    learned per step (needs the explicit flag).
    """

    finding_id: str
    requests: tuple[FixRequest, ...] = ()
    reason: str | None = None
    statistic: str = "step_s"
    changes_learning: bool = False

    @property
    def injectable(self) -> bool:
        """Whether there is something to run."""
        return bool(self.requests)

    def label(self) -> str:
        """The fixes as one line (``num_workers(num_workers=2) + persistent_workers``)."""
        return " + ".join(r.label() for r in self.requests) if self.requests else ""


PlanFn = Callable[[Finding, bool], FixPlan]


def _changed_after(finding: Finding, key: str) -> Any:
    """The value the finding's model change gives ``key`` after the fix (None when it does not change it)."""
    changed = finding.evidence.get("model_inputs_changed") or {}
    pair = changed.get(key)
    return pair[1] if isinstance(pair, (list, tuple)) and len(pair) == 2 else None


def _plan(finding: Finding, *requests: FixRequest, **kwargs: Any) -> FixPlan:
    return FixPlan(finding.id, tuple(requests), **kwargs)


def _no(finding: Finding, why: str) -> FixPlan:
    return FixPlan(finding.id, reason=f"{NOT_VERIFIABLE}: {why}")


def _workers(finding: Finding, allow: bool) -> FixPlan:
    workers = finding.evidence.get("suggested_workers")
    if "per_item_max_s" in finding.evidence:
        return _plan(finding, request("batched_fetch"), statistic="mean_step_s")
    if isinstance(workers, int) and workers > 0:
        return _plan(finding, request("num_workers", num_workers=workers), request("persistent_workers"),
                     statistic="mean_step_s")
    return _no(finding, "the fix is cheaper loading stages")


def _threads(finding: Finding, allow: bool) -> FixPlan:
    threads = _changed_after(finding, "compute_threads") or finding.evidence.get("cores_usable")
    if not threads:
        return _no(finding, "no thread count to set")
    return _plan(finding, request("threads", threads=max(1, int(threads))))


def _contention(finding: Finding, allow: bool) -> FixPlan:
    threads, workers = _changed_after(finding, "compute_threads"), _changed_after(finding, "workers")
    requests = []
    if threads is not None:
        requests.append(request("threads", threads=max(1, int(threads))))
    if workers is not None:
        requests.append(request("num_workers", num_workers=int(workers)))
    if not requests:
        return _no(finding, "the fastest split is a batch-level transform")
    # The workers' CPU lands on the compute in bursts (a batch's samples at a time): the estimate is
    # on the mean step, and so is the comparison.
    return _plan(finding, *requests, statistic="mean_step_s")


def _small_batch(finding: Finding, allow: bool) -> FixPlan:
    growth = finding.evidence.get("batch_growth")
    samples = finding.evidence.get("samples_per_step")
    if (finding.evidence.get("micro_batches_per_step") or 1) >= 2 or not growth or not samples:
        return _no(finding, "gradient accumulation is set in the script's own loop")
    batch = int(round(samples)) * int(growth)
    if not allow:
        return FixPlan(finding.id, reason=f"batch {batch} changes what is learned per step: "
                       "pass --allow-learning-changes to measure it", changes_learning=True)
    return _plan(finding, request("batch_size", allow_learning_changes=True, batch_size=batch, scale_lr=True),
                 statistic="samples_per_s", changes_learning=True)


def _single(unit_id: str, statistic: str = "step_s", **params: Any) -> PlanFn:
    def plan(finding: Finding, allow: bool) -> FixPlan:
        return _plan(finding, request(unit_id, **params), statistic=statistic)

    return plan


def _optimizer(finding: Finding, allow: bool) -> FixPlan:
    # fused where the probe measured it; foreach otherwise (every optimizer with fused has foreach too).
    impl = "fused" if finding.evidence.get("probe_fused_ratio") is not None else "foreach"
    return _plan(finding, request("optimizer_impl", impl=impl))


FIX_MAP: dict[str, PlanFn] = {
    "DATA_CPU_BOUND": _workers,
    "DATA_IO_BOUND": _workers,
    "DATA_WORKER_STARTUP": _single("persistent_workers", statistic="mean_step_s"),
    "THREAD_OVERSUBSCRIPTION": _threads,
    "CPU_CONTENTION": _contention,
    "NO_MIXED_PRECISION": _single("autocast"),
    "OPTIMIZER_UNFUSED": _optimizer,
    "NO_COMPILE": _single("compile"),
    "CUDNN_BENCHMARK_OFF": _single("cudnn_benchmark"),
    "H2D_PAGEABLE": _single("pin_memory"),
    "TENSOR_CORES_UNUSED": _single("tf32"),
    "SMALL_BATCH": _small_batch,
}


def plan_for(finding: Finding, allow_learning_changes: bool = False) -> FixPlan:
    """The fixes that verify ``finding`` (see :data:`FIX_MAP`), or why there are none."""
    if finding.id == "MACHINE_BUSY":
        return FixPlan(finding.id, reason="about the machine, not the script: nothing to inject")
    fn = FIX_MAP.get(finding.id)
    if fn is None:
        return FixPlan(finding.id, reason=NOT_VERIFIABLE)
    try:
        return fn(finding, allow_learning_changes)
    except UsageError as exc:  # evidence out of a unit's range (a worker count of -1): say so, run nothing
        return _no(finding, str(exc))
