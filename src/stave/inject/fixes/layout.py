"""channels_last (NHWC) for convolutional models and their 4-D inputs."""

from __future__ import annotations

from typing import Any

import torch

from stave.inject.outermost import Listener, has_parameters, listen
from stave.inject.registry import register
from stave.inject.machine import Machine
from stave.inject.unit import Applied, FixUnit


def has_conv2d(module: torch.nn.Module) -> bool:
    """Whether ``module`` contains a 2-D convolution."""
    return any(isinstance(m, torch.nn.Conv2d) for m in module.modules())


def nhwc_args(args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """``args`` with their 4-D floating tensors in channels_last (None when none is 4-D floating)."""
    changed = False
    out = []
    for arg in args:
        if isinstance(arg, torch.Tensor) and arg.dim() == 4 and arg.is_floating_point():
            arg = arg.contiguous(memory_format=torch.channels_last)
            changed = True
        out.append(arg)
    return tuple(out) if changed else None


def _apply(applied: Applied, params: dict[str, Any], machine: Machine) -> None:
    decided: dict[int, bool] = {}
    converted: list[torch.nn.Module] = []

    def enter(module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        key = id(module)
        if key not in decided:
            decided[key] = has_parameters(module) and has_conv2d(module)
            if decided[key]:
                # In place: the Parameter objects stay the same, so the optimizer keeps them.
                module.to(memory_format=torch.channels_last)
                converted.append(module)
                applied.hits += 1
            elif has_parameters(module):
                applied.note(f"{type(module).__name__} has no 2-D convolution: left in its layout")
        return nhwc_args(args) if decided[key] else None

    applied.on_undo(listen(Listener(enter, None)))

    def back_to_nchw() -> None:
        for module in converted:
            module.to(memory_format=torch.contiguous_format)

    applied.on_undo(back_to_nchw)


CHANNELS_LAST = register(FixUnit(
    id="channels_last",
    title="channels_last",
    changes="a model with 2-D convolutions and its 4-D inputs in channels_last (NHWC) memory layout",
    params=(),
    apply=_apply,
    undo_doc="the forward hook removed and converted models set back to the contiguous layout",
    no_hit="the script's models have no 2-D convolution",
    model_input="phase_speed",
))
