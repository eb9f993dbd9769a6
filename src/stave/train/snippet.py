"""A :class:`~stave.train.config.TrainConfig` written out as plain PyTorch a user can paste.

The same lines serve ``stave tune``, the ladder's final configuration and the doctor's fixes, so a
user sees one way to write each optimization. The code needs only torch: it names ``model``,
``optimizer``, ``criterion``, ``loader`` and ``device``, which the user's script already has.
"""

from __future__ import annotations

import inspect
from typing import Any, Sequence

import torch

from stave.train.config import TrainConfig
from stave.train.switches import get_switch

_DTYPE_NAMES = {"bf16": "torch.bfloat16", "fp16": "torch.float16"}


def optimizer_expression(optimizer: torch.optim.Optimizer, impl: str, params: str = "model.parameters()") -> str:
    """``torch.optim.X(params, <non-default hyper-parameters>, foreach/fused=True)`` for this optimizer."""
    cls = type(optimizer)
    signature = inspect.signature(cls.__init__).parameters
    if len(optimizer.param_groups) > 1:
        # Several groups (e.g. weight decay on matrices only): the user's own groups, unchanged.
        params = "param_groups"
    args = [params]
    for name, value in optimizer.defaults.items():
        if name in ("foreach", "fused", "differentiable", "capturable") or name not in signature:
            continue
        default = signature[name].default
        # lr is always written out: it is the setting a reader looks for first.
        if name == "lr" or default is inspect.Parameter.empty or not _same(value, default):
            args.append(f"{name}={_literal(value)}")
    if impl in ("foreach", "fused"):
        args.append(f"{impl}=True")
    module = cls.__module__
    prefix = "torch.optim." if module.startswith("torch.optim") else f"{module}."
    return f"{prefix}{cls.__name__}({', '.join(args)})"


def snippet(
    config: TrainConfig,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    normalize: tuple[Sequence[float], Sequence[float]] | None = None,
    non_blocking: bool = False,
    image_inputs: bool = True,
) -> str:
    """Plain-PyTorch code for ``config``: set-up lines, then the loop body.

    ``optimizer`` (an instance) is rendered with its hyper-parameters; ``normalize`` = (mean, std)
    in [0, 1] units adds uint8-to-float normalization on the device; ``non_blocking`` marks copies
    from pinned memory; ``image_inputs`` False leaves out memory-format conversions of the inputs.
    """
    changed = config.changed_fields()
    extras = {k: changed.pop(k) for k in dict(config.extras)}
    header = f"# stave.train.TrainConfig({_kwargs(changed)})"
    lines = [header + (f".with_changes({_kwargs(extras)})" if extras else "")]
    memory = ", memory_format=torch.channels_last" if config.channels_last else ""
    lines.append(f"model = model.to(device{memory})")
    if config.cudnn_benchmark:
        lines.append("torch.backends.cudnn.benchmark = True  # GPU: time conv algorithms once per shape")
    for name, value in config.extras:
        lines.extend(get_switch(name).code(value))  # type: ignore[union-attr]
    if optimizer is not None:
        if len(optimizer.param_groups) > 1:
            lines.append("# param_groups: your parameter groups, built as before")
        lines.append(f"optimizer = {optimizer_expression(optimizer, config.optimizer_impl)}")
    elif config.optimizer_impl != "default":
        lines.append(f"# build the optimizer with {config.optimizer_impl}=True")
    if config.precision == "fp16":
        lines.append('scaler = torch.amp.GradScaler("cuda")  # fp16 only: keeps small gradients from flushing to zero')
    if config.compile:
        mode = config.compile_mode or ("reduce-overhead" if config.cuda_graphs else None)
        arg = f', mode="{mode}"' if mode else ""
        lines.append(f"model = torch.compile(model{arg})  # the first steps compile; time them apart")
    elif config.cuda_graphs:
        lines.append("# CUDA graphs: model = torch.cuda.make_graphed_callables(model, (sample_batch,))")
    if normalize is not None:
        mean, std = normalize
        lines.append(f"mean = torch.tensor({_floats(mean)}, device=device).view(1, -1, 1, 1) * 255")
        lines.append(f"std = torch.tensor({_floats(std)}, device=device).view(1, -1, 1, 1) * 255")
    lines.append("for inputs, targets in loader:")
    lines.extend("    " + line for line in _loop_body(config, normalize is not None, non_blocking, image_inputs))
    return "\n".join(lines) + "\n"


def _loop_body(config: TrainConfig, normalize: bool, non_blocking: bool, image_inputs: bool) -> list[str]:
    nb = ", non_blocking=True" if non_blocking else ""
    body = []
    if non_blocking:
        body.append("# non_blocking: the copy from pinned memory overlaps the previous step's compute")
    body.append(f"inputs, targets = inputs.to(device{nb}), targets.to(device{nb})")
    if normalize:
        body.append("inputs = (inputs.float() - mean) / std  # uint8 on the wire, normalized on the device")
    if config.channels_last and image_inputs:
        body.append("inputs = inputs.contiguous(memory_format=torch.channels_last)")
    call = "loss = criterion(model(inputs), targets)"
    if config.precision in _DTYPE_NAMES:
        body.append(f"with torch.autocast(device.type, dtype={_DTYPE_NAMES[config.precision]}):")
        body.append("    " + call)
    else:
        body.append(call)
    body.append(f"optimizer.zero_grad(set_to_none={config.set_to_none})")
    if config.precision == "fp16":
        body.append("scaler.scale(loss).backward()")
        body.append("scaler.step(optimizer)  # SYNC: reads the inf/NaN check on the host")
        body.append("scaler.update()")
    else:
        body.append("loss.backward()")
        body.append("optimizer.step()")
    body.append("# read loss.item() only every N steps: each call waits for the device (SYNC)")
    return body


def _kwargs(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_literal(v)}" for k, v in values.items())


def _literal(value: Any) -> str:
    if isinstance(value, float):
        return repr(float(f"{value:.6g}"))
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return _literal(value.item())
    return repr(value)


def _floats(values: Sequence[float]) -> str:
    return "[" + ", ".join(_literal(float(v)) for v in values) + "]"


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except (RuntimeError, ValueError):
        # Tensors of several elements compare element-wise; treat them as non-default.
        return False
