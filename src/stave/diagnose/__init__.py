"""Findings: rules are small pure functions over measurements; the engine runs and ranks them.

Public pieces: :class:`Finding`, the :func:`rule` decorator that registers a rule under a stable
ID for one kind of input ("doctor", "trace", "ranks"), and :func:`run_rules`.
"""

from stave.diagnose.engine import Rule, registered_rules, rule, run_rules
from stave.diagnose.finding import SEVERITIES, Finding, rank_findings, severity_for_speedup

__all__ = [
    "SEVERITIES",
    "Finding",
    "Rule",
    "rank_findings",
    "registered_rules",
    "rule",
    "run_rules",
    "severity_for_speedup",
]
