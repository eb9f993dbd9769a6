"""The loss check: a rung must not change what the model learns.

From the same initial weights and the same batches, the candidate configuration's losses over the
first :data:`LOSS_CHECK_STEPS` steps are compared with the fp32 reference's (the job's own step and
input pipeline) at the same batch size. The largest relative deviation must stay within
:data:`LOSS_REL_TOL`. The batches go through each configuration's own input pipeline, so a rung
that changes the inputs (a lost normalization, a wrong channel order) shows here, not only one that
changes the arithmetic.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch

from stave.bench.pipeline import check_batches
from stave.bench.session import build_model
from stave.bench.settings import RunConfig
from stave.bench.spec import JobSpec
from stave.train.step import build_step

log = logging.getLogger(__name__)

# Steps compared. Long enough that the first updates feed back into the loss (a broken input or
# update shows from the second step on), short enough that the chaotic divergence every change of
# float summation order starts (fp32 channels_last alone drifts by ~0.2% after 5 steps of
# ResNet-18) has not yet grown to the size of a real error.
LOSS_CHECK_STEPS = 4
# Largest allowed |loss - fp32 loss| / |fp32 loss|. bf16 autocast (8 significant bits, fp32
# accumulation) moves an early-training loss by ~0.1-0.3%; inputs on another scale or mean move it
# by several percent. 1% sits between the two with margin on both sides.
LOSS_REL_TOL = 0.01
# Below this magnitude a loss is compared in absolute terms (a relative error of a ~0 loss is noise).
LOSS_ABS_FLOOR = 1e-2


@dataclass(frozen=True)
class LossCheck:
    """A candidate's losses beside the fp32 reference's, step by step."""

    losses: tuple[float, ...]
    reference: tuple[float, ...]
    tolerance: float

    @property
    def deviations(self) -> list[float]:
        """Relative deviation per step (inf for a non-finite loss)."""
        out = []
        for loss, ref in zip(self.losses, self.reference):
            if not (math.isfinite(loss) and math.isfinite(ref)):
                out.append(math.inf)
            else:
                out.append(abs(loss - ref) / max(abs(ref), LOSS_ABS_FLOOR))
        return out

    @property
    def max_dev(self) -> float:
        """The largest deviation over the compared steps."""
        return max(self.deviations) if self.losses else 0.0

    @property
    def worst_step(self) -> int:
        """Index of the step with the largest deviation."""
        devs = self.deviations
        return devs.index(max(devs)) if devs else 0

    @property
    def passed(self) -> bool:
        """True when every step is within the tolerance."""
        return self.max_dev <= self.tolerance

    def describe(self) -> str:
        """Short text: the largest deviation against the tolerance, and where (for a failed check)."""
        if math.isinf(self.max_dev):
            return f"loss not finite at step {self.worst_step}"
        return f"loss off by {self.max_dev:.2%} > {self.tolerance:.0%} at step {self.worst_step}"


class LossChecker:
    """Runs candidates' first steps and compares them with the fp32 reference (cached per batch size)."""

    def __init__(
        self,
        spec: JobSpec,
        device: torch.device,
        initial_state: dict[str, torch.Tensor],
        reference_config: RunConfig,
        image_inputs: bool,
        steps: int = LOSS_CHECK_STEPS,
        tolerance: float = LOSS_REL_TOL,
    ) -> None:
        self.spec = spec
        self.device = device
        self.initial_state = initial_state
        self.reference_config = reference_config
        self.image_inputs = image_inputs
        self.steps = steps
        self.tolerance = tolerance
        self._references: dict[int, tuple[float, ...]] = {}

    def losses(self, config: RunConfig, batch_size: int | None = None) -> tuple[float, ...]:
        """The first ``steps`` losses of ``config`` from the shared initial weights and batches."""
        size = batch_size or config.batch_size
        channels_last = self.image_inputs and config.train.channels_last
        batches = check_batches(self.spec, config, self.device, channels_last, size, self.steps)
        step = build_step(build_model(self.spec, self.initial_state), self.spec.optimizer, self.spec.loss, config.train, self.device)
        values = [step(inputs, targets) for inputs, targets in batches]
        # SYNC: one transfer of all losses at the end, not one per step.
        return tuple(float(v) for v in torch.stack(values).float().cpu().tolist())

    def reference(self, batch_size: int) -> tuple[float, ...]:
        """The fp32 reference's losses at ``batch_size`` (the job's own step and pipeline)."""
        if batch_size not in self._references:
            config = self.reference_config.with_changes(batch_size=batch_size)
            self._references[batch_size] = self.losses(config)
        return self._references[batch_size]

    def check(self, config: RunConfig) -> LossCheck:
        """Compare ``config`` with the reference at its own batch size."""
        reference = self.reference(config.batch_size)
        losses = self.losses(config)
        return LossCheck(losses, reference, self.tolerance)
