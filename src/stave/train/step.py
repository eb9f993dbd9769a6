"""The optimized training step: one function you can read top to bottom, and a builder around it.

:func:`train_step` is the whole step (forward under autocast, loss, zero_grad, backward, optimizer
update). :func:`build_step` applies a :class:`~stave.train.config.TrainConfig` to a model and its
optimizer once (device, memory format, optimizer implementation, ``torch.compile``, CUDA graphs)
and returns a :class:`TrainStep` that calls :func:`train_step`. The same code runs on CPU and GPU;
GPU-only switches are no-ops on a CPU (see :mod:`stave.device`).

Host/device synchronization points are marked ``SYNC`` in comments: on a GPU each one stalls the
host until the device catches up, so the step has none except where fp16 needs one.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from typing import Any, Callable

import torch
from torch import nn

from stave import device as dev
from stave.train.config import TrainConfig
from stave.train.optim import OptimizerFactory, with_impl
from stave.train.switches import get_switch

log = logging.getLogger(__name__)

LossFn = Callable[[Any, torch.Tensor], torch.Tensor]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast_context(
    device_type: str, precision: str, cache_enabled: bool = True
) -> contextlib.AbstractContextManager[Any]:
    """``torch.autocast`` for ``precision`` ("bf16"/"fp16"), a no-op context for "fp32"."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=_DTYPES[precision], cache_enabled=cache_enabled)


def train_step(
    model: Callable[[Any], Any],
    optimizer: torch.optim.Optimizer,
    loss_fn: LossFn,
    inputs: Any,
    targets: torch.Tensor,
    *,
    precision: str = "fp32",
    scaler: torch.amp.GradScaler | None = None,
    set_to_none: bool = True,
    autocast_cache: bool = True,
) -> torch.Tensor:
    """One optimizer step on a batch that is already on the device; returns the loss (a tensor).

    The loss comes back as a device tensor, not a float: ``loss.item()`` would be a SYNC, so read
    it only every N steps, or accumulate it on the device.
    """
    device_type = targets.device.type
    # Autocast runs matmuls and convolutions in bf16/fp16 and keeps reductions such as
    # cross-entropy in fp32, so the loss itself is fp32.
    with autocast_context(device_type, precision, cache_enabled=autocast_cache):
        outputs = model(inputs)
        loss = loss_fn(outputs, targets)
    # set_to_none frees the gradients instead of writing zeros into them; backward then writes
    # fresh ones (one pass over the gradient memory instead of two).
    optimizer.zero_grad(set_to_none=set_to_none)
    if scaler is None:
        loss.backward()
        optimizer.step()
    else:
        # fp16 only: scale the loss so small gradients do not flush to zero.
        scaler.scale(loss).backward()
        # SYNC: GradScaler.step reads the inf/NaN check of the gradients on the host to decide
        # whether to skip this update; bf16 has fp32's range and needs no scaler.
        scaler.step(optimizer)
        scaler.update()
    return loss.detach()


class TrainStep:
    """A model, optimizer and loss with a :class:`TrainConfig` applied; ``step(inputs, targets)``.

    Build it with :func:`build_step`. ``model`` is the module as configured (moved, channels_last)
    and ``forward`` is what the step calls (the compiled or graphed module, or ``model`` itself).
    """

    def __init__(
        self,
        model: nn.Module,
        forward: Callable[[Any], Any],
        optimizer: torch.optim.Optimizer,
        loss_fn: LossFn,
        config: TrainConfig,
        device: torch.device,
        scaler: torch.amp.GradScaler | None,
    ) -> None:
        self.model = model
        self.forward = forward
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.config = config
        self.device = device
        self.scaler = scaler
        self._graphed = False

    def prepare_inputs(self, inputs: Any) -> Any:
        """Inputs in the memory format the configured model expects (NHWC with channels_last)."""
        if self.config.channels_last and isinstance(inputs, torch.Tensor) and inputs.dim() == 4:
            # A no-op when the loader already delivers NHWC batches.
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        return inputs

    def __call__(self, inputs: Any, targets: torch.Tensor) -> torch.Tensor:
        """Run one step; returns the loss as a device tensor (no SYNC)."""
        inputs = self.prepare_inputs(inputs)
        if self.config.cuda_graphs and not self.config.compile and not self._graphed and dev.is_cuda(self.device):
            # Captured on the first real batch: the graph replays these shapes only.
            self.forward = dev.make_graphed_module(self.model, inputs)
            self._graphed = True
            # The capture's warm-up leaves reference cycles that hold CUDA tensors. Collected later
            # inside a DataLoader worker forked meanwhile, they would be freed by the child, whose
            # CUDA calls fail ("CUDA error: initialization error", seen on an H100): collect them
            # here, in the process that owns them.
            gc.collect()
        return train_step(
            self.forward,
            self.optimizer,
            self.loss_fn,
            inputs,
            targets,
            precision=self.config.precision,
            scaler=self.scaler,
            set_to_none=self.config.set_to_none,
            # A captured graph must not reuse autocast's cast cache across replays.
            autocast_cache=not self.config.cuda_graphs,
        )


def build_step(
    model: nn.Module,
    optimizer: OptimizerFactory | torch.optim.Optimizer,
    loss_fn: LossFn,
    config: TrainConfig | None = None,
    device: str | torch.device | None = None,
) -> TrainStep:
    """Apply ``config`` to ``model`` and its optimizer and return the step to call per batch.

    ``optimizer`` is either a factory called with the model (after it is on its device, e.g.
    ``lambda m: torch.optim.SGD(m.parameters(), lr=0.1)``) or an optimizer already built on this
    model's parameters; either way it gets the requested foreach/fused implementation with the
    same hyper-parameters.
    """
    config = config or TrainConfig()
    target = dev.resolve_device(device)
    model = model.to(target)
    if config.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if config.cudnn_benchmark:
        dev.set_cudnn_benchmark(True)
    for name, value in config.extras:
        # A registered switch's own set-up (stave.train.switches), before the optimizer sees the model.
        model = get_switch(name).apply(model, target, value)  # type: ignore[union-attr]
    opt = optimizer if isinstance(optimizer, torch.optim.Optimizer) else optimizer(model)
    opt = with_impl(opt, config.optimizer_impl)
    scaler = torch.amp.GradScaler(target.type) if config.precision == "fp16" else None
    forward: Callable[[Any], Any] = model
    if config.compile:
        mode = config.compile_mode
        if config.cuda_graphs and dev.is_cuda(target) and mode is None:
            # torch.compile's CUDA-graph mode: capture and replay handled by inductor.
            mode = "reduce-overhead"
        forward = torch.compile(model, mode=mode)
    return TrainStep(model, forward, opt, loss_fn, config, target, scaler)
