"""Per-step records: the additive split of each optimizer step's wall time into phases."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

# The phases of a training step, in the order they usually run. ``other`` is what remains of the
# step after the measured phases; it is computed, never measured directly.
PHASES: tuple[str, ...] = ("data_wait", "h2d", "forward", "backward", "optimizer", "other")
MEASURED_PHASES: tuple[str, ...] = PHASES[:-1]


@dataclass
class PhaseSpan:
    """One interval the main thread spent in a phase (host clock, ns since an arbitrary origin)."""

    phase: str
    start_ns: int
    end_ns: int
    step: int = -1

    @property
    def duration_ns(self) -> int:
        """Length of the span."""
        return self.end_ns - self.start_ns


@dataclass
class StepRecord:
    """One optimizer step, from the end of the previous step to the end of this one.

    The phase times add up to at most the duration; ``other_ns`` is the rest. On a GPU the phase
    times come from CUDA events (``device_timed``), so they describe the GPU timeline; on CPU they
    are the host clock.

    Evaluation run between two optimizer steps (forwards under ``no_grad``/``inference_mode`` or of
    a model in ``eval()`` mode, with the batch fetches that feed them) is ``eval_ns``: it is part of
    the wall time (``wall_ns``) but not of the training step (``duration_ns``), its phases or its
    samples. Token counts come from the model's training forward inputs (``input_ids`` and
    ``attention_mask``, or the integer tensor an embedding model is fed): ``tokens`` as fed
    (padding included), ``real_tokens`` without padding, ``longest_tokens`` had each micro-batch
    been padded only to its longest row, ``token_sq`` / ``real_token_sq`` / ``longest_token_sq``
    the sums of squared row lengths (attention's cost grows with them). 0: not seen.
    ``samples`` are the token rows the training forwards consumed when token ids were seen, else
    the rows of the DataLoader batches fetched in the step, else the rows of the model's inputs.
    """

    index: int
    start_ns: int
    end_ns: int
    data_wait_ns: int = 0
    h2d_ns: int = 0
    forward_ns: int = 0
    backward_ns: int = 0
    optimizer_ns: int = 0
    comm_wait_ns: int = 0
    eval_ns: int = 0
    eval_forwards: int = 0
    samples: int = 0
    tokens: int = 0
    real_tokens: int = 0
    longest_tokens: int = 0
    token_sq: int = 0
    real_token_sq: int = 0
    longest_token_sq: int = 0
    h2d_bytes: int = 0
    data_fetches: int = 0
    forward_calls: int = 0
    backward_calls: int = 0
    warmup: bool = False
    profiled: bool = False
    flop_counted: bool = False
    device_timed: bool = False
    # The main process's resident memory at the step's end (0: not read): a leak's line for a run
    # too short for the host sampler's ~10 Hz samples to draw one.
    rss_bytes: int = 0
    # The main process's CPU (all its threads) over the step's wall time, and over its data waits,
    # nanoseconds (0: not read). What the trainer's threads got of the cores while computing is the
    # difference over the compute time: the measured side of the step model's CPU budget.
    cpu_ns: int = 0
    data_wait_cpu_ns: int = 0
    # Frames torch.compile compiled inside the step (dynamo's counter; 0 without torch.compile).
    compiled_frames: int = 0

    @property
    def wall_ns(self) -> int:
        """Wall time from the previous step's end to this one's, evaluation included."""
        return self.end_ns - self.start_ns

    @property
    def duration_ns(self) -> int:
        """Training time of the step: its wall time less the evaluation run inside it."""
        return self.end_ns - self.start_ns - self.eval_ns

    @property
    def other_ns(self) -> int:
        """Time in the step not covered by a measured phase (never negative)."""
        measured = self.data_wait_ns + self.h2d_ns + self.forward_ns + self.backward_ns + self.optimizer_ns
        return max(0, self.duration_ns - measured)

    def phase_ns(self, phase: str) -> int:
        """Time of one phase by name (one of :data:`PHASES`)."""
        if phase == "other":
            return self.other_ns
        return int(getattr(self, f"{phase}_ns"))

    @property
    def counted(self) -> bool:
        """True when the step enters the statistics (not warm-up, not slowed by a profiler or counter)."""
        return not (self.warmup or self.profiled or self.flop_counted)


def step_time_s(durations_s: Iterable[float]) -> float:
    """stave's step time: the median of per-step durations in seconds; 0.0 for no steps.

    The one statistic behind every "step time" stave reports (doctor summary, progress line, trace
    analysis, per-rank timings). A median, not a mean: one step that paid a one-off cost (a
    checkpoint, a recompile) moves a mean but not the step the user pays for every time.
    """
    values = sorted(durations_s)
    n = len(values)
    if n == 0:
        return 0.0
    mid = n // 2
    return float(values[mid]) if n % 2 else (values[mid - 1] + values[mid]) / 2.0
