"""The rule registry and runner.

A rule is a pure function ``(input) -> Finding | list[Finding] | None`` registered with a stable ID
for one input kind. The engine runs every rule of a kind, keeps going when one rule fails (and says
so in the log and in the returned notes), and ranks the result.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from stave.diagnose.finding import MACHINE_IDS, Finding, rank_findings

log = logging.getLogger(__name__)

# doctor: DoctorInput (one process); trace: the trace analysis; ranks: list[RankTiming] (shared by
# trace and distributed doctor); records: list[RunRecord], one per rank (distributed doctor only).
INPUT_KINDS = ("doctor", "trace", "ranks", "records")

RuleFunc = Callable[[Any], "Finding | Iterable[Finding] | None"]


@dataclass(frozen=True)
class Rule:
    """A registered rule: ID, input kind, and the function."""

    id: str
    kind: str
    func: RuleFunc


_REGISTRY: dict[str, list[Rule]] = {kind: [] for kind in INPUT_KINDS}


def rule(finding_id: str, kind: str = "doctor") -> Callable[[RuleFunc], RuleFunc]:
    """Register ``func`` as the rule for ``finding_id`` over inputs of ``kind``."""
    if kind not in INPUT_KINDS:
        raise ValueError(f"rule kind {kind!r} is not one of {INPUT_KINDS}")

    def decorate(func: RuleFunc) -> RuleFunc:
        rules = _REGISTRY[kind]
        rules[:] = [r for r in rules if not (r.id == finding_id and r.func.__qualname__ == func.__qualname__)]
        rules.append(Rule(finding_id, kind, func))
        return func

    return decorate


def registered_rules(kind: str) -> list[Rule]:
    """The rules registered for ``kind`` (importing the rule modules first)."""
    import stave.diagnose.rules  # noqa: F401  (registers the built-in rules)

    return list(_REGISTRY[kind])


def run_rules(kind: str, inp: Any, notes: list[str] | None = None) -> list[Finding]:
    """Run every rule of ``kind`` over ``inp``; return the findings ranked.

    A rule that raises is a bug in stave, not in the user's job: it is logged with its traceback,
    noted in ``notes`` and skipped, so one broken rule cannot cost the user the whole report.
    """
    findings: list[Finding] = []
    for r in registered_rules(kind):
        try:
            result = r.func(inp)
        except Exception as exc:  # a rule bug must not lose the report; logged with traceback
            log.exception("rule %s failed", r.id)
            if notes is not None:
                notes.append(f"rule {r.id} failed: {type(exc).__name__}: {exc}")
            continue
        if result is None:
            continue
        if isinstance(result, Finding):
            findings.append(result)
        else:
            findings.extend(result)
    return rank_findings(mark_uncertain(findings))


def mark_uncertain(findings: list[Finding]) -> list[Finding]:
    """With a finding about the machine present, the timing-based findings (est > 1) are less certain."""
    if not any(f.id in MACHINE_IDS for f in findings):
        return findings
    return [dataclasses.replace(f, certain=False) if f.id not in MACHINE_IDS and f.est_speedup > 1.0 else f
            for f in findings]
