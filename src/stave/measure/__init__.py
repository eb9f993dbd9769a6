"""Plain measurement types shared by capture, monitor, trace, analysis, rules and reports.

Times are integer nanoseconds inside (``*_ns``); seconds appear only at the edges (JSON, reports).
A counter the machine does not provide is ``None`` (absent), never 0.
"""

from stave.measure.config import ConfigSnapshot, LoaderInfo, OptimizerInfo, TensorInfo
from stave.measure.host import HostSample
from stave.measure.pipeline import CopyStat, StageStat, SyncSite, WorkerStats
from stave.measure.record import ProbeResults, RunInfo, RunRecord
from stave.measure.stacks import FrameKey, StackProfile
from stave.measure.steps import PHASES, PhaseSpan, StepRecord

__all__ = [
    "PHASES",
    "ConfigSnapshot",
    "CopyStat",
    "FrameKey",
    "HostSample",
    "LoaderInfo",
    "OptimizerInfo",
    "PhaseSpan",
    "ProbeResults",
    "RunInfo",
    "RunRecord",
    "StackProfile",
    "StageStat",
    "StepRecord",
    "SyncSite",
    "TensorInfo",
    "WorkerStats",
]
