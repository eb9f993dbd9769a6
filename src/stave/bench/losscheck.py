"""The loss check: a rung must not change what the model sees, computes or learns.

From the same initial weights and the same samples, a candidate configuration is compared with the
fp32 reference (the job's own step and input pipeline) at the same batch size, in four parts:

1. **Losses** (the issue's check): the first :data:`LOSS_CHECK_STEPS` training losses; the largest
   relative deviation, ``max_loss_dev``, must stay within the loss tolerance. Early training
   amplifies any difference, even a change of summation order, and how much depends on the job
   (a high learning rate on class-sorted batches amplifies far more than the seed's SGD). The
   tolerance is therefore :data:`LOSS_REL_TOL` or :data:`LOSS_NOISE_FACTOR` times the deviation
   that rounding the initial weights to bf16 causes in this job, whichever is larger.
2. **Inputs**: per-channel mean and standard deviation of the candidate's input batches against
   the reference's (``input_dev``, in units of the reference's standard deviation). A dropped
   normalization moves them by whole standard deviations; a different JPEG decoder or resampler
   by hundredths.
3. **Targets**: the candidate's targets must equal the reference's (the same samples, so the
   same labels); a rung that shifts or shuffles labels fails here, which the first losses of a
   freshly initialized classifier (all near log(classes)) would not show.
4. **Outputs**: the model's outputs on the first batch before any update (``output_dev``,
   relative L2). Near initialization a classifier's loss sits at about log(classes) whatever its
   inputs, so the losses alone miss input-side mistakes that change every output by tens of
   percent. Gated only where the candidate feeds the same pixels (same loader); a custom loader
   may crop and resample differently, and is held to the input statistics instead.

Batches go through each configuration's own input pipeline. Torch's generator is seeded the same
before each run, so dropout draws the same masks in eager mode (a compiled model draws its own).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import torch

from stave import device as dev
from stave.bench.pipeline import check_batches, check_order
from stave.bench.session import build_model
from stave.bench.settings import TORCH_LOADER, RunConfig
from stave.bench.spec import JobSpec
from stave.train.step import autocast_context, build_step

log = logging.getLogger(__name__)

# Steps compared. Long enough that the first updates feed back into the loss (a broken update
# shows from the second step on), short enough that the chaotic divergence every change of float
# summation order starts has not yet grown to the size of a real error.
LOSS_CHECK_STEPS = 4
# The loss tolerance's floor: |loss - fp32 loss| / |fp32 loss|. bf16 autocast moves the seed
# workload's early losses by ~0.1-0.3%; a broken update or loss moves them by several percent.
LOSS_REL_TOL = 0.01
# The loss tolerance scales with the job's own sensitivity: bf16 autocast rounds every activation
# and gradient, not only the weights, and moved ResNet-18's early losses up to 5x as much as
# rounding the weights to bf16 did (seed and JPEG workloads, five initializations each); 10x
# keeps a factor-2 margin over that.
LOSS_NOISE_FACTOR = 10.0
# Largest allowed ||out - fp32 out|| / ||fp32 out|| on the first batch. bf16 rounds every layer's
# activations to 8 bits and the errors add up with depth: ResNet-18's logits move by 2.5-5%.
# Inputs on another scale or mean move them by 50-90%. 15% leaves room for deeper nets.
OUTPUT_REL_TOL = 0.15
# Largest allowed shift of a channel's mean (in reference standard deviations) or relative change
# of its standard deviation. Decoders and resamplers that agree to a few levels shift them by
# ~0.01; a lost normalization by ~0.5-4; swapped colour channels by ~0.2 on natural images.
INPUT_STAT_TOL = 0.1
# For a fix that moves random draws to other generators (loader workers), the input statistics may
# differ from the baseline's as much as another seed's do; twice that seed-to-seed deviation is
# allowed (a lost normalization still moves them by 0.5-4 sd, far beyond a few batches' noise).
INPUT_NOISE_FACTOR = 2.0
# Below this magnitude a loss is compared in absolute terms (a relative error of a ~0 loss is noise).
LOSS_ABS_FLOOR = 1e-2
# Seed of torch's generator before each checked run (dropout masks, random init of lazy layers).
CHECK_SEED = 1234


def loss_deviations(losses: tuple[float, ...], reference: tuple[float, ...]) -> list[float]:
    """Relative deviation per step (inf where a loss is not finite)."""
    out = []
    for loss, ref in zip(losses, reference):
        if not (math.isfinite(loss) and math.isfinite(ref)):
            out.append(math.inf)
        else:
            out.append(abs(loss - ref) / max(abs(ref), LOSS_ABS_FLOOR))
    return out


@dataclass(frozen=True)
class LossCheck:
    """A candidate beside the fp32 reference: losses, input statistics, first outputs."""

    losses: tuple[float, ...]
    reference: tuple[float, ...]
    tolerance: float
    input_dev: float | None = None
    output_dev: float | None = None
    targets_match: bool | None = None
    outputs_gated: bool = True
    first_step_s: float | None = None
    output_tolerance: float = OUTPUT_REL_TOL
    input_tolerance: float = INPUT_STAT_TOL

    @property
    def deviations(self) -> list[float]:
        """Relative loss deviation per step."""
        return loss_deviations(self.losses, self.reference)

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
    def inputs_passed(self) -> bool:
        """Input statistics within their tolerance (True when not comparable, e.g. token ids)."""
        return self.input_dev is None or self.input_dev <= self.input_tolerance

    @property
    def outputs_passed(self) -> bool:
        """First outputs within their tolerance, where they are gated and comparable."""
        return not self.outputs_gated or self.output_dev is None or self.output_dev <= self.output_tolerance

    @property
    def passed(self) -> bool:
        """All parts pass."""
        return self.losses_passed and self.inputs_passed and self.targets_match is not False and self.outputs_passed

    def describe(self) -> str:
        """Short text naming the part that failed (or the loss deviation when all passed)."""
        if math.isinf(self.max_dev):
            return f"loss not finite at step {self.worst_step}"
        if self.targets_match is False:
            return "targets differ from the reference's for the same samples"
        if not self.inputs_passed:
            return f"inputs changed: channel statistics off by {self.input_dev:.2f} sd > {self.input_tolerance}"
        if not self.outputs_passed:
            return (
                f"outputs off by {self.output_dev:.0%} > {self.output_tolerance:.0%} (losses within {self.max_dev:.2%})"
            )
        if not self.losses_passed:
            return f"loss off by {self.max_dev:.2%} > {self.tolerance:.1%} at step {self.worst_step}"
        return f"loss within {self.max_dev:.2%}"


def _flat(outputs: Any) -> torch.Tensor | None:
    """The model outputs as one float vector (tensors in tuples/lists/dicts); None when there are none."""
    if isinstance(outputs, torch.Tensor):
        return outputs.detach().float().reshape(-1)
    if isinstance(outputs, dict):
        outputs = list(outputs.values())
    if isinstance(outputs, (list, tuple)):
        parts = [p for p in (_flat(o) for o in outputs) if p is not None]
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


def channel_stats(batches: list[Any]) -> torch.Tensor | None:
    """Per-channel (mean, std) of floating image-like inputs (N, C, ...), shape (C, 2); None otherwise."""
    inputs = [b[0] for b in batches]
    if not inputs or not all(isinstance(x, torch.Tensor) and x.is_floating_point() and x.dim() >= 2 for x in inputs):
        return None
    channels = torch.cat([x.detach().float().transpose(0, 1).reshape(x.shape[1], -1) for x in inputs], dim=1)
    return torch.stack([channels.mean(dim=1), channels.std(dim=1)], dim=1).cpu()


def stats_deviation(candidate: torch.Tensor | None, reference: torch.Tensor | None) -> float | None:
    """Largest channel mean shift (in reference sds) or relative sd change; None when not comparable."""
    if candidate is None or reference is None or candidate.shape != reference.shape:
        return None
    ref_sd = reference[:, 1].clamp_min(1e-12)
    mean_shift = (candidate[:, 0] - reference[:, 0]).abs() / ref_sd
    sd_change = (candidate[:, 1] / ref_sd - 1.0).abs()
    value = float(torch.maximum(mean_shift, sd_change).max())
    return value if math.isfinite(value) else math.inf


def yardstick_tolerance(yardstick_losses: list[float], baseline_losses: list[float]) -> float:
    """The loss tolerance of a job seen only from outside (a script run in a child process): the floor,
    or the noise factor times how far bf16-rounded initial weights moved its first losses (the yardstick
    run). A yardstick that did not run (``[]``) leaves the floor."""
    devs = [d for d in loss_deviations(tuple(yardstick_losses), tuple(baseline_losses)) if math.isfinite(d)]
    return max(LOSS_REL_TOL, LOSS_NOISE_FACTOR * max(devs, default=0.0))


def check_child_losses(
    losses: list[float] | None,
    input_stats: list[list[float]] | None,
    base_losses: list[float],
    base_input_stats: list[list[float]] | None,
    tolerance: float,
    input_tolerance: float = INPUT_STAT_TOL,
) -> LossCheck:
    """The check of a script run against the baseline's run (same seed, same first steps): its first
    losses (``losses`` None: not compared, for a fix that changes what is learned per step) and its
    input channel statistics ([mean, sd] per channel, as :mod:`stave.inject.probe` records them)."""

    compared = tuple(losses) if losses is not None else ()
    reference = tuple(base_losses) if losses is not None else ()
    return LossCheck(compared, reference, tolerance, input_dev=child_stats_deviation(input_stats, base_input_stats),
                     input_tolerance=input_tolerance)


def child_stats_deviation(input_stats: list[list[float]] | None,
                          base_input_stats: list[list[float]] | None) -> float | None:
    """:func:`stats_deviation` of two child runs' input statistics ([mean, sd] rows; None: not comparable)."""

    def stats(rows: list[list[float]] | None) -> torch.Tensor | None:
        return torch.tensor(rows, dtype=torch.float64) if rows else None

    return stats_deviation(stats(input_stats), stats(base_input_stats))


def input_noise_tolerance(other_seed_stats: list[list[float]] | None,
                          base_input_stats: list[list[float]] | None) -> float:
    """The input-statistics tolerance for a fix that reseeds random draws (loader workers draw
    augmentations from their own seeds): the floor, or :data:`INPUT_NOISE_FACTOR` times how far a
    run with another seed moved the statistics."""
    dev = child_stats_deviation(other_seed_stats, base_input_stats)
    noise = dev if dev is not None and math.isfinite(dev) else 0.0
    return max(INPUT_STAT_TOL, INPUT_NOISE_FACTOR * noise)


def _same(candidate: torch.Tensor | None, reference: torch.Tensor | None) -> bool | None:
    """Whether two target vectors agree (exactly for labels; to float tolerance otherwise)."""
    if candidate is None or reference is None:
        return None
    if candidate.shape != reference.shape:
        return False
    return bool(torch.allclose(candidate, reference, rtol=1e-4, atol=1e-6))


@dataclass(frozen=True)
class CheckRun:
    """What one configuration did on the check batches."""

    losses: tuple[float, ...]
    outputs: torch.Tensor | None
    stats: torch.Tensor | None
    targets: torch.Tensor | None
    first_step_s: float


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
        self._references: dict[tuple[int, str], CheckRun] = {}
        self._tolerances: dict[tuple[int, str], float] = {}

    def run(
        self, config: RunConfig, order: str | None = None, state: dict[str, torch.Tensor] | None = None
    ) -> CheckRun:
        """``config``'s first outputs, input statistics and losses on the check batches."""
        channels_last = self.image_inputs and config.train.channels_last
        batches = check_batches(self.spec, config, self.device, channels_last, config.batch_size, self.steps, order)
        torch.manual_seed(CHECK_SEED)
        model = build_model(self.spec, state if state is not None else self.initial_state)
        step = build_step(model, self.spec.optimizer, self.spec.loss, config.train, self.device)
        first_inputs = step.prepare_inputs(batches[0][0])
        # The eager model, even under compile: a no-grad call would compile a second (inference)
        # graph for minutes; the losses below run the compiled training graph.
        with torch.no_grad(), autocast_context(self.device.type, config.train.precision):
            outputs = _flat(step.model(first_inputs))
        stats = channel_stats(batches)
        targets = _flat([b[1] for b in batches])
        started = time.perf_counter()
        values = [step(*batches[0])]
        # SYNC: the first step's duration includes any compilation (reported as compile_s).
        dev.synchronize(self.device)
        first_step_s = time.perf_counter() - started
        values += [step(inputs, targets) for inputs, targets in batches[1:]]
        # SYNC: one transfer of all losses at the end, not one per step.
        losses = tuple(float(v) for v in torch.stack(values).float().cpu().tolist())
        return CheckRun(
            losses,
            outputs.cpu() if outputs is not None else None,
            stats,
            targets.cpu() if targets is not None else None,
            first_step_s,
        )

    def reference(self, batch_size: int, order: str) -> CheckRun:
        """The fp32 reference run at ``batch_size`` in ``order`` (the job's own step and pipeline)."""
        key = (batch_size, order)
        if key not in self._references:
            self._references[key] = self.run(self.reference_config.with_changes(batch_size=batch_size), order)
        return self._references[key]

    def loss_tolerance(self, batch_size: int, order: str) -> float:
        """The loss tolerance for this job: the floor, or the factor times the bf16-rounding deviation."""
        key = (batch_size, order)
        if key not in self._tolerances:
            rounded = {
                k: (v.to(torch.bfloat16).to(v.dtype) if v.is_floating_point() else v)
                for k, v in self.initial_state.items()
            }
            perturbed = self.run(self.reference_config.with_changes(batch_size=batch_size), order, rounded)
            devs = [
                d
                for d in loss_deviations(perturbed.losses, self.reference(batch_size, order).losses)
                if math.isfinite(d)
            ]
            sensitivity = max(devs, default=0.0)
            self._tolerances[key] = max(self.tolerance, LOSS_NOISE_FACTOR * sensitivity)
            log.info(
                "loss tolerance at batch %d: %.3f (bf16-rounded weights moved the losses by %.4f)",
                batch_size,
                self._tolerances[key],
                sensitivity,
            )
        return self._tolerances[key]

    def check(self, config: RunConfig) -> LossCheck:
        """Compare ``config`` with the reference at its own batch size and sample order."""
        order = check_order(config)
        reference = self.reference(config.batch_size, order)
        candidate = self.run(config, order)
        return LossCheck(
            candidate.losses,
            reference.losses,
            self.loss_tolerance(config.batch_size, order),
            input_dev=stats_deviation(candidate.stats, reference.stats),
            output_dev=relative_l2(candidate.outputs, reference.outputs),
            targets_match=_same(candidate.targets, reference.targets),
            first_step_s=candidate.first_step_s,
            outputs_gated=config.loader == TORCH_LOADER,
        )
