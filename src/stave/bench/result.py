"""What the ladder found: one :class:`Trial` per configuration timed, one :class:`RungResult` per rung."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stave.bench.settings import RunConfig

KEPT = "kept"
REVERTED = "reverted"
SKIPPED = "skipped"
BASELINE = "baseline"

# Why a rung was reverted; the channels_last rung retries a rung reverted for SPEED together with it.
REVERT_SPEED = "speed"
REVERT_LOSS = "loss"
REVERT_ERROR = "error"


@dataclass
class Trial:
    """One candidate configuration, timed against ``base`` (the configuration it would replace).

    ``config`` is a :class:`RunConfig` for a built-in workload or ``--job`` spec, and a
    :class:`stave.bench.script_rungs.ScriptConfig` (the fixes injected) for a script.
    """

    label: str
    changes: dict[str, Any]
    config: Any
    samples_per_s: float | None = None
    ratio: float | None = None
    noise: float | None = None
    x_baseline: float | None = None
    data_wait_share: float | None = None
    peak_mem_bytes: int | None = None
    max_loss_dev: float | None = None
    output_dev: float | None = None
    input_dev: float | None = None
    targets_match: bool | None = None
    loss_tolerance: float | None = None
    loss_passed: bool | None = None
    compile_s: float | None = None
    window_rates: list[float] = field(default_factory=list)
    accepted: bool = False
    reason: str = ""
    revert_kind: str | None = None


@dataclass
class RungResult:
    """A rung's outcome: the trial it kept (if any) and every trial it ran."""

    name: str
    title: str
    status: str
    reason: str
    trials: list[Trial] = field(default_factory=list)
    chosen: Trial | None = None
    revert_kind: str | None = None

    @property
    def kept(self) -> bool:
        """True when the rung's change is part of the configuration from here on."""
        return self.status in (KEPT, BASELINE)

    @property
    def shown(self) -> Trial | None:
        """The trial the table shows: the kept one, else the best-timed one."""
        if self.chosen is not None:
            return self.chosen
        timed = [t for t in self.trials if t.ratio is not None]
        if timed:
            return max(timed, key=lambda t: t.ratio or 0.0)
        return self.trials[0] if self.trials else None


@dataclass
class LadderResult:
    """Everything ``stave bench ladder`` reports (JSON: schema ``stave.bench/1``)."""

    workload: str
    description: str
    unit: str
    items_per_sample: int
    machine: dict[str, Any]
    options: dict[str, Any]
    baseline: RunConfig
    final: RunConfig
    rungs: list[RungResult]
    # None in an incomplete result (the climb stopped before the final comparison).
    baseline_samples_per_s: float | None
    final_samples_per_s: float | None
    best_speedup: float | None
    best_speedup_noise: float | None
    chain_speedup: float
    fed: dict[str, Any]
    mfu: dict[str, Any]
    loss_check: dict[str, Any]
    code: str
    duration_s: float
    notes: list[str] = field(default_factory=list)
    # Why the climb stopped early (interrupted, a failure); None for a complete result.
    incomplete: str | None = None

    @property
    def fed_ratio(self) -> float | None:
        """Final configuration with its real input pipeline / the same fed one batch over and over."""
        value = self.fed.get("ratio")
        return float(value) if value is not None else None


@dataclass
class ScriptLadderResult:
    """What ``stave bench ladder SCRIPT`` found (JSON: schema ``stave.bench.script/1``).

    ``baseline``/``final`` are :class:`stave.bench.script_rungs.ScriptConfig`: the fixes injected.
    The attributes the ladder's table reads (``workload``, ``machine``, ``unit``, ``rungs`` ...)
    have the names :class:`LadderResult` gives them.
    """

    script: str
    args: list[str]
    machine: dict[str, Any]
    options: dict[str, Any]
    baseline: Any
    final: Any
    rungs: list[RungResult]
    baseline_samples_per_s: float | None
    final_samples_per_s: float | None
    best_speedup: float | None
    best_speedup_noise: float | None
    chain_speedup: float
    loss_check: dict[str, Any]
    code: str
    duration_s: float
    runs: int
    fed: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    incomplete: str | None = None
    unit: str = "samples"
    items_per_sample: int = 1

    @property
    def workload(self) -> str:
        """The script and its arguments, as the table's title names the workload."""
        return " ".join([self.script, *self.args])


class LadderIncomplete(Exception):
    """The climb stopped early; ``result`` holds what was measured until then.

    ``cause`` is the exception that stopped it (re-raised by the CLI after the files are written).
    """

    def __init__(self, result: "LadderResult | ScriptLadderResult", cause: BaseException) -> None:
        super().__init__(result.incomplete or "incomplete")
        self.result = result
        self.cause = cause
