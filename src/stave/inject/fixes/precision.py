"""Autocast of the model's forward: bf16, or fp16 with loss scaling on GPUs without bf16.

The outermost call of each module with parameters (the model; a loss module has none) runs under
``torch.autocast``; its floating outputs are cast back to fp32 so the loss is computed in fp32, as
it is inside an autocast region for the usual losses. A script that already autocasts is left alone.
fp16 adds what a GradScaler does: the loss is scaled before backward, the gradients unscaled
before the optimizer step, and the step skipped (gradients dropped) when they overflowed.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.optim import optimizer as optim_module

from stave.inject.outermost import Listener, has_parameters, listen
from stave.inject.patches import patch_attr
from stave.inject.registry import register
from stave.inject.machine import Machine
from stave.inject.unit import Applied, FixUnit, Param

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def chosen_dtype(params: dict[str, Any], machine: Machine) -> str | None:
    """The dtype asked for, or the machine's native reduced precision."""
    return params.get("dtype") or machine.precision


def _applicable(params: dict[str, Any], machine: Machine) -> str | None:
    dtype = chosen_dtype(params, machine)
    if dtype is None:
        return machine.precision_reason
    if dtype == "fp16" and not machine.cuda:
        return "fp16 autocast is for GPUs without bf16; on a CPU it is emulated and slower than fp32"
    if dtype == "bf16" and not machine.bf16_native:
        return f"bf16 is not native here ({machine.precision_reason})"
    return None


def to_fp32(output: Any) -> Any:
    """``output`` with its half-precision floating tensors cast to fp32 (tuples, lists, dicts walked)."""
    if isinstance(output, torch.Tensor):
        return output.float() if output.dtype in (torch.float16, torch.bfloat16) else output
    if isinstance(output, tuple) and not hasattr(output, "_fields"):
        return tuple(to_fp32(o) for o in output)
    if isinstance(output, list):
        return [to_fp32(o) for o in output]
    if isinstance(output, dict):
        return type(output)((k, to_fp32(v)) for k, v in output.items()) if type(output) is dict else output
    return output


def _apply(applied: Applied, params: dict[str, Any], machine: Machine) -> None:
    dtype_name = chosen_dtype(params, machine)
    assert dtype_name is not None
    applied.params["dtype"] = dtype_name
    dtype = _DTYPES[dtype_name]
    contexts: list[Any] = []

    def enter(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        param = next(module.parameters(), None) if has_parameters(module) else None
        if param is None:
            contexts.append(None)
            return None
        device_type = param.device.type
        if torch.is_autocast_enabled(device_type):
            applied.note("the script runs autocast already: its own region was kept")
            contexts.append(None)
            return None
        ctx = torch.autocast(device_type, dtype=dtype)
        ctx.__enter__()
        contexts.append(ctx)
        applied.hits += 1
        return None

    def leave(module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        ctx = contexts.pop() if contexts else None
        if ctx is None:
            return None
        ctx.__exit__(None, None, None)
        return to_fp32(output)

    applied.on_undo(listen(Listener(enter, leave)))
    if dtype_name == "fp16":
        _install_loss_scaling(applied)


def _install_loss_scaling(applied: Applied) -> None:
    """What a GradScaler does around backward and the optimizer step, without touching the script."""
    scaler = torch.amp.GradScaler("cuda")
    original_backward = torch.autograd.backward

    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(tensors, torch.Tensor) and tensors.dim() == 0 and tensors.is_floating_point():
            tensors = scaler.scale(tensors)
        return original_backward(tensors, *args, **kwargs)

    patch_attr(applied, torch.autograd, "backward", backward)

    def pre_step(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        scaler.unscale_(opt)
        found = sum(float(v.item()) for v in scaler._found_inf_per_device(opt).values())
        if found:
            # An overflowed step is skipped, as GradScaler.step skips it: no gradient, no update.
            for group in opt.param_groups:
                for p in group["params"]:
                    p.grad = None
            applied.note("skipped optimizer steps whose fp16 gradients overflowed (the scale is lowered)")

    def post_step(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        scaler.update()

    handles = [optim_module.register_optimizer_step_pre_hook(pre_step),
               optim_module.register_optimizer_step_post_hook(post_step)]
    applied.on_undo(lambda: [h.remove() for h in handles])


AUTOCAST = register(FixUnit(
    id="autocast",
    title="autocast",
    changes="the model's forward (and so its backward) in bf16 autocast; fp16 with loss scaling on GPUs "
            "without bf16; the model's outputs cast back to fp32 for the loss",
    params=(Param("dtype", "str", "bf16 or fp16 (default: the device's native reduced precision)",
                  choices=("bf16", "fp16")),),
    apply=_apply,
    undo_doc="the forward hooks removed (and torch.autograd.backward and the optimizer hooks for fp16)",
    no_hit="no module with parameters was called outside an autocast region",
    model_input="phase_speed",
    numeric=True,
    applicable=_applicable,
))
