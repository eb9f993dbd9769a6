"""The script ladder's final configuration as code: what to write into the script to keep each kept fix.

stave never edits the user's files; these are the lines the user pastes, one group per kept fix,
keyed by the fix unit's id (:mod:`stave.inject.registry`). A unit without an entry here is shown
by what it changes, in the unit's own words.
"""

from __future__ import annotations

from typing import Any, Callable

from stave.inject.registry import get_unit

_DTYPES = {"bf16": "torch.bfloat16", "fp16": "torch.float16"}


def _loader_arg(name: str) -> Callable[[dict[str, Any]], list[str]]:
    def lines(params: dict[str, Any]) -> list[str]:
        value = params.get(name, True)
        return [f"loader = DataLoader(dataset, ..., {name}={value!r})"]

    return lines


def _autocast(params: dict[str, Any]) -> list[str]:
    dtype = _DTYPES.get(params.get("dtype") or "bf16", "torch.bfloat16")
    out = [f"with torch.autocast(device.type, dtype={dtype}):  # forward and loss only",
           "    loss = loss_fn(model(inputs), targets)"]
    if params.get("dtype") == "fp16":
        out = ["scaler = torch.amp.GradScaler()  # fp16 needs loss scaling", *out,
               "scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()"]
    return out


def _batch_size(params: dict[str, Any]) -> list[str]:
    out = [f"loader = DataLoader(dataset, batch_size={params['batch_size']}, ...)"]
    if params.get("scale_lr"):
        out.append("# and the learning rate scaled by the same factor as the batch")
    out.append("# changes what is learned per step: re-check convergence and the learning-rate schedule")
    return out


CODE: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "num_workers": _loader_arg("num_workers"),
    "persistent_workers": _loader_arg("persistent_workers"),
    "prefetch_factor": _loader_arg("prefetch_factor"),
    "pin_memory": lambda p: ["loader = DataLoader(dataset, ..., pin_memory=True)",
                             "inputs = inputs.to(device, non_blocking=True)"],
    "batched_fetch": lambda p: ["# fetch whole batches from the tensors instead of one sample at a time:",
                                "loader = DataLoader(dataset, batch_size=None, "
                                "sampler=BatchSampler(RandomSampler(dataset), batch_size, drop_last=False))"],
    "threads": lambda p: [f"torch.set_num_threads({p['threads']})"],
    "autocast": _autocast,
    "channels_last": lambda p: ["model = model.to(memory_format=torch.channels_last)",
                                "inputs = inputs.to(memory_format=torch.channels_last)"],
    "tf32": lambda p: ["torch.backends.cuda.matmul.allow_tf32 = True", "torch.backends.cudnn.allow_tf32 = True"],
    "cudnn_benchmark": lambda p: ["torch.backends.cudnn.benchmark = True"],
    "optimizer_impl": lambda p: [f"optimizer = torch.optim.<YourOptimizer>(model.parameters(), ..., "
                                 f"{p.get('impl') or 'fused'}=True)"],
    "set_to_none": lambda p: ["optimizer.zero_grad(set_to_none=True)"],
    "compile": lambda p: [f"model = torch.compile(model{', mode=' + repr(p['mode']) if p.get('mode') else ''})"],
    "batch_size": _batch_size,
}


def script_code(script: str, changes: dict[str, dict[str, Any]]) -> str:
    """Paste-able lines for the fixes in ``changes`` (fix id -> parameters), with a header."""
    header = [f"# stave bench ladder: the fixes kept for {script} on this machine"]
    if not changes:
        return "\n".join(header + ["# no fix helped measurably: the script as written is kept"]) + "\n"
    lines = list(header)
    for unit_id, params in changes.items():
        unit = get_unit(unit_id)
        lines.append(f"# {unit.title if unit is not None else unit_id}")
        if unit_id in CODE:
            lines.extend(CODE[unit_id](params))
        else:
            lines.append(f"# {unit.changes if unit is not None else 'see docs/bench.md'}")
    return "\n".join(lines) + "\n"
