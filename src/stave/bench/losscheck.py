"""The loss check: a rung must not change what the model computes or learns.

From the same initial weights and the same batches, a candidate configuration is compared with the
fp32 reference (the job's own step and input pipeline) at the same batch size, in two ways:

1. **Losses**: the first :data:`LOSS_CHECK_STEPS` training losses; the largest relative deviation
   (``max_loss_dev``) must stay within :data:`LOSS_REL_TOL`.
2. **Outputs**: the model's outputs on the first batch before any update; their relative L2
   deviation (``output_dev``) must stay within :data:`OUTPUT_REL_TOL`. Near initialization a
   classifier's loss sits at about log(classes) whatever its inputs, so a rung that silently changes
   the inputs (a dropped normalization, swapped channels) can leave the early losses within 1%
   while it changes every output by tens of percent: this part catches it.

Batches go through each configuration's own input pipeline, so input-side rungs are checked, not
only arithmetic ones. Torch's generator is seeded identically before each run, so dropout draws
the same masks in eager mode (a compiled model draws its own: see docs/bench.md).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import torch

from stave.bench.pipeline import check_batches
from stave.bench.session import build_model
from stave.bench.settings import RunConfig
from stave.bench.spec import JobSpec
from stave.train.step import autocast_context, build_step

log = logging.getLogger(__name__)

# Steps compared. Long enough that the first updates feed back into the loss (a broken input or
# update shows from the second step on), short enough that the chaotic divergence every change of
# float summation order starts (fp32 channels_last alone drifts by ~0.2% after 5 steps of
# ResNet-18) has not yet grown to the size of a real error.
LOSS_CHECK_STEPS = 4
# Largest allowed |loss - fp32 loss| / |fp32 loss| over those steps. bf16 autocast (8 significant
# bits, fp32 accumulation) moves an early-training loss by ~0.1-0.3% (ResNet-18 on the seed);
# a broken update or loss moves it by several percent.
LOSS_REL_TOL = 0.01
# Largest allowed ||out - fp32 out|| / ||fp32 out|| on the first batch. bf16 rounds every layer's
# activations to 8 bits and the errors add up with depth: ResNet-18's logits move by 2.5-5%.
# Inputs on another scale or mean move them by 50-90%. 15% leaves room for deeper nets.
OUTPUT_REL_TOL = 0.15
# Below this magnitude a loss is compared in absolute terms (a relative error of a ~0 loss is noise).
LOSS_ABS_FLOOR = 1e-2
# Seed of torch's generator before each checked run (dropout masks, random init of lazy layers).
CHECK_SEED = 1234


@dataclass(frozen=True)
class LossCheck:
    """A candidate's losses and first outputs beside the fp32 reference's."""

    losses: tuple[float, ...]
    reference: tuple[float, ...]
    tolerance: float
    output_dev: float | None = None
    output_tolerance: float = OUTPUT_REL_TOL

    @property
    def deviations(self) -> list[float]:
        """Relative loss deviation per step (inf for a non-finite loss)."""
        out = []
        for loss, ref in zip(self.losses, self.reference):
            if not (math.isfinite(loss) and math.isfinite(ref)):
                out.append(math.inf)
            else:
                out.append(abs(loss - ref) / max(abs(ref), LOSS_ABS_FLOOR))
        return out

    @property
    def max_dev(self) -> float:
        """The largest loss deviation over the compared steps."""
        return max(self.deviations) if self.losses else 0.0

    @property
    def worst_step(self) -> int:
        """Index of the step with the largest loss deviation."""
        devs = self.deviations
        return devs.index(max(devs)) if devs else 0

    @property
    def losses_passed(self) -> bool:
        """Every step's loss within the tolerance."""
        return self.max_dev <= self.tolerance

    @property
    def outputs_passed(self) -> bool:
        """The first outputs within their tolerance (True when outputs were not comparable)."""
        return self.output_dev is None or self.output_dev <= self.output_tolerance

    @property
    def passed(self) -> bool:
        """Both parts pass."""
        return self.losses_passed and self.outputs_passed

    def describe(self) -> str:
        """Short text naming the part that failed (or the deviations when it passed)."""
        if math.isinf(self.max_dev):
            return f"loss not finite at step {self.worst_step}"
        if not self.losses_passed:
            return f"loss off by {self.max_dev:.2%} > {self.tolerance:.0%} at step {self.worst_step}"
        if not self.outputs_passed:
            return f"outputs off by {self.output_dev:.0%} > {self.output_tolerance:.0%} (losses within {self.max_dev:.2%})"
        return f"loss within {self.max_dev:.2%}"


def _flat(outputs: Any) -> torch.Tensor | None:
    """The model outputs as one float vector (tensors in tuples/lists/dicts); None when there are none."""
    if isinstance(outputs, torch.Tensor):
        return outputs.detach().float().reshape(-1)
    if isinstance(outputs, dict):
        outputs = list(outputs.values())
    if isinstance(outputs, (list, tuple)):
        parts = [_flat(o) for o in outputs]
        parts = [p for p in parts if p is not None]
        return torch.cat(parts) if parts else None
    return None


def relative_l2(candidate: torch.Tensor | None, reference: torch.Tensor | None) -> float | None:
    """||c - r|| / ||r|| (None when either is missing or the shapes differ)."""
    if candidate is None or reference is None or candidate.shape != reference.shape:
        return None
    norm = float(reference.norm())
    diff = float((candidate - reference).norm())
    if not math.isfinite(diff):
        return math.inf
    return diff / norm if norm > 0 else (0.0 if diff == 0 else math.inf)


@dataclass(frozen=True)
class _Run:
    losses: tuple[float, ...]
    outputs: torch.Tensor | None


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
        output_tolerance: float = OUTPUT_REL_TOL,
    ) -> None:
        self.spec = spec
        self.device = device
        self.initial_state = initial_state
        self.reference_config = reference_config
        self.image_inputs = image_inputs
        self.steps = steps
        self.tolerance = tolerance
        self.output_tolerance = output_tolerance
        self._references: dict[int, _Run] = {}

    def run(self, config: RunConfig) -> _Run:
        """The first outputs and ``steps`` losses of ``config`` from the shared weights and batches."""
        channels_last = self.image_inputs and config.train.channels_last
        batches = check_batches(self.spec, config, self.device, channels_last, config.batch_size, self.steps)
        torch.manual_seed(CHECK_SEED)
        step = build_step(build_model(self.spec, self.initial_state), self.spec.optimizer, self.spec.loss, config.train, self.device)
        first_inputs = step.prepare_inputs(batches[0][0])
        with torch.no_grad(), autocast_context(self.device.type, config.train.precision):
            outputs = _flat(step.forward(first_inputs))
        values = [step(inputs, targets) for inputs, targets in batches]
        # SYNC: one transfer of all losses at the end, not one per step.
        losses = tuple(float(v) for v in torch.stack(values).float().cpu().tolist())
        return _Run(losses, outputs.cpu() if outputs is not None else None)

    def reference(self, batch_size: int) -> _Run:
        """The fp32 reference run at ``batch_size`` (the job's own step and pipeline)."""
        if batch_size not in self._references:
            self._references[batch_size] = self.run(self.reference_config.with_changes(batch_size=batch_size))
        return self._references[batch_size]

    def check(self, config: RunConfig) -> LossCheck:
        """Compare ``config`` with the reference at its own batch size."""
        reference = self.reference(config.batch_size)
        candidate = self.run(config)
        return LossCheck(
            candidate.losses,
            reference.losses,
            self.tolerance,
            relative_l2(candidate.outputs, reference.outputs),
            self.output_tolerance,
        )
