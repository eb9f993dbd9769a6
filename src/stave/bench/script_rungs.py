"""The ladder's rungs for the user's unmodified script: one per injectable fix of :mod:`stave.inject`.

A configuration of a script is the set of fixes injected into it (:class:`ScriptConfig`); the
baseline injects none. Each rung names one fix unit and the values to try, searched as the built-in
ladder searches (:class:`stave.bench.rungs.Plan`: ``single``, ``best``, ``grow``). Which values to
try is data (:data:`SCRIPT_RUNGS`); whether a fix applies at all is the unit's own declaration
(``FixUnit.not_applicable``), asked before anything runs. A fix that changes what is learned per step
(batch size) is a rung only with ``allow_learning_changes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from stave.bench.rungs import MAX_WORKERS, Plan
from stave.inject.machine import Machine
from stave.inject.registry import all_units, get_unit
from stave.inject.selection import FixRequest, Selection, request, selection

# Largest batch the script's batch-size rung tries, as a multiple of the script's own: beyond it the
# learning-rate schedule needs re-tuning anyway, and each window of a script run gets long.
MAX_BATCH_FACTOR = 8
# The DataLoader prefetch depth tried (torch's default is 2 batches per worker).
PREFETCH_FACTOR = 4


@dataclass(frozen=True)
class ScriptConfig:
    """The fixes injected into one run of the script, in registry order (one request per fix id)."""

    fixes: tuple[FixRequest, ...] = ()

    def with_changes(self, allow_learning_changes: bool = False, **changes: dict[str, Any]) -> "ScriptConfig":
        """A copy with the fixes in ``changes`` (fix id -> parameters) added or re-parameterized."""
        by_id = {f.id: f for f in self.fixes}
        for unit_id, params in changes.items():
            by_id[unit_id] = request(unit_id, allow_learning_changes=allow_learning_changes, **params)
        order = [u.id for u in all_units()]
        return ScriptConfig(tuple(sorted(by_id.values(), key=lambda f: order.index(f.id))))

    def selection(self, allow_learning_changes: bool = False) -> Selection:
        """The validated selection a child run receives."""
        return selection(*self.fixes, allow_learning_changes=allow_learning_changes)

    def to_dict(self) -> dict[str, Any]:
        """Fix id -> its parameters (JSON-ready)."""
        return {f.id: f.param_dict for f in self.fixes}

    def changes_from(self, other: "ScriptConfig") -> dict[str, Any]:
        """The fixes (with parameters) this configuration has and ``other`` has differently or not at all."""
        theirs = other.to_dict()
        return {k: v for k, v in self.to_dict().items() if theirs.get(k) != v}

    def changes_learning(self) -> bool:
        """Whether a fix here changes what is learned per step."""
        return any((u := get_unit(f.id)) is not None and u.changes_learning for f in self.fixes)

    def label(self) -> str:
        """``num_workers(num_workers=2) + set_to_none``, or ``as written``."""
        return " + ".join(f.label() for f in self.fixes) or "as written"


@dataclass(frozen=True)
class ScriptContext:
    """What a script rung may look at: the machine, the script's batch size, the options."""

    machine: Machine
    batch_size: int | None
    allow_learning_changes: bool
    quick: bool


@dataclass(frozen=True)
class ScriptRung:
    """A rung over one fix unit: ``values(ctx, current)`` gives the candidates' parameters."""

    name: str
    unit_id: str
    mode: str
    values: Callable[[ScriptContext, ScriptConfig], list[dict[str, Any]]]
    skip_quick: bool = False

    @property
    def title(self) -> str:
        """The unit's own title."""
        unit = get_unit(self.unit_id)
        return unit.title if unit is not None else self.unit_id

    def plan(self, ctx: ScriptContext, current: ScriptConfig) -> Plan:
        """The candidates, or why this rung is skipped on this machine."""
        unit = get_unit(self.unit_id)
        if unit is None:
            return Plan.skipped(f"no injectable fix named {self.unit_id!r} in this stave")
        if self.skip_quick and ctx.quick:
            return Plan.skipped("--quick (inductor takes minutes on a few cores)")
        if unit.changes_learning and not ctx.allow_learning_changes:
            return Plan.skipped(f"changes what is learned per step ({unit.changes}); "
                                "pass --allow-learning-changes to measure it")
        values = self.values(ctx, current)
        candidates = []
        for params in values:
            validated = unit.validated(params)
            reason = unit.not_applicable(validated, ctx.machine)
            if reason is not None:
                return Plan.skipped(reason)
            if current.to_dict().get(self.unit_id) == validated:
                continue
            shown = FixRequest(self.unit_id, tuple(validated.items())).label()
            candidates.append((shown, {self.unit_id: params}))
        if not candidates:
            return Plan.skipped("nothing left to try: the kept configuration has it already")
        return Plan(self.mode if len(candidates) > 1 else "single", tuple(candidates))


def _defaults(ctx: ScriptContext, current: ScriptConfig) -> list[dict[str, Any]]:
    return [{}]


def _worker_counts(ctx: ScriptContext, current: ScriptConfig) -> list[dict[str, Any]]:
    """1, 2, 4, ... up to the usable cores (the script's own count is not known from outside)."""
    counts, n = [], 1
    while n <= min(ctx.machine.cores, MAX_WORKERS):
        counts.append({"num_workers": n})
        n *= 2
    return counts


def _threads(ctx: ScriptContext, current: ScriptConfig) -> list[dict[str, Any]]:
    """All usable cores (what torch picks when the script does not set fewer)."""
    return [{"threads": ctx.machine.cores}]


def _prefetch(ctx: ScriptContext, current: ScriptConfig) -> list[dict[str, Any]]:
    return [{"prefetch_factor": PREFETCH_FACTOR}]


def _optimizer_impls(ctx: ScriptContext, current: ScriptConfig) -> list[dict[str, Any]]:
    return [{"impl": "foreach"}, {"impl": "fused"}]


def _batch_sizes(ctx: ScriptContext, current: ScriptConfig) -> list[dict[str, Any]]:
    """Doubling from the script's own batch (seen in its baseline run) up to ``MAX_BATCH_FACTOR`` times it."""
    if not ctx.batch_size:
        return []
    sizes, b = [], ctx.batch_size * 2
    while b <= ctx.batch_size * MAX_BATCH_FACTOR:
        sizes.append({"batch_size": b})
        b *= 2
    return sizes


# The script ladder, in the order it is climbed (the built-in ladder's order: the input pipeline,
# the batch, then the step's compute). A unit registered in stave.inject but missing here is not a rung.
SCRIPT_RUNGS: tuple[ScriptRung, ...] = (
    ScriptRung("workers", "num_workers", "grow", _worker_counts),
    ScriptRung("persistent_workers", "persistent_workers", "single", _defaults),
    ScriptRung("prefetch_factor", "prefetch_factor", "single", _prefetch),
    ScriptRung("batched_fetch", "batched_fetch", "single", _defaults),
    ScriptRung("pin_memory", "pin_memory", "single", _defaults),
    ScriptRung("threads", "threads", "single", _threads),
    ScriptRung("batch_size", "batch_size", "grow", _batch_sizes),
    ScriptRung("set_to_none", "set_to_none", "single", _defaults),
    ScriptRung("autocast", "autocast", "single", _defaults),
    ScriptRung("channels_last", "channels_last", "single", _defaults),
    ScriptRung("optimizer", "optimizer_impl", "best", _optimizer_impls),
    ScriptRung("compile", "compile", "single", _defaults, skip_quick=True),
    ScriptRung("tf32", "tf32", "single", _defaults),
    ScriptRung("cudnn_benchmark", "cudnn_benchmark", "single", _defaults),
)


def script_rungs(names: list[str] | None = None) -> list[ScriptRung]:
    """The script rungs, or only those named (in ladder order); unknown names raise ``KeyError``."""
    if names is None:
        return list(SCRIPT_RUNGS)
    known = {r.name for r in SCRIPT_RUNGS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise KeyError(", ".join(unknown))
    return [r for r in SCRIPT_RUNGS if r.name in names]
