"""Trace rule DATA_WAIT: the training loop waits for the DataLoader.

In the additive breakdown, ``dataloader`` is time inside ``enumerate(DataLoader)#...__next__`` during
which the GPU ran nothing (or, in CPU-only traces, loader time of the step). A trace cannot tell
whether the loader was waiting on storage or on CPU work (decode, augmentation): the finding says so
and points to ``stave doctor``, which measures the loader's stages.
"""

from __future__ import annotations

from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.rules.trace_common import REPORT_MIN_SPEEDUP, speedup, trace_finding
from stave.trace.analysis import TraceAnalysis

# Data loading below 5% of the step is within the step-to-step noise of a training job.
DATA_WAIT_SHARE = 0.05


@rule("DATA_WAIT", kind="trace")
def data_wait(t: TraceAnalysis) -> Finding | None:
    """The step waits for the next batch."""
    share = t.breakdown_share.get("dataloader", 0.0)
    if share < DATA_WAIT_SHARE:
        return None
    T = t.step_time_median_s
    saved = t.part_mean_s("dataloader")
    est = speedup(T, saved)
    if est < REPORT_MIN_SPEEDUP:
        return None
    return trace_finding(
        "DATA_WAIT",
        est,
        f"The loop waits for the DataLoader {share:.0%} of the step",
        {"data_wait_per_step_s": saved, "data_wait_share": share, "step_time_s": T},
        fix="""\
loader = DataLoader(dataset, batch_size=batch_size, num_workers=min(8, os.cpu_count()),
                    pin_memory=True, persistent_workers=True, prefetch_factor=4)
# then run `stave doctor train.py` to see whether reading or decoding is the slow stage""",
        explanation=(
            "A profiler trace shows the wait but not its cause: it cannot tell I/O from CPU work in "
            "the loader. `stave doctor train.py` measures the loader's stages and says which."
        ),
    )
