"""Fixes that change what is learned per step: the batch size (and, with it, the learning rate).

Never applied silently: :func:`stave.inject.selection.request` refuses them unless the caller sets
``allow_learning_changes``, and every report names them as changing the training, not only its speed.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.optim import optimizer as optim_module

from stave.inject.loader_args import ORDER_BATCH_SIZE, override_loader_args
from stave.inject.machine import Machine
from stave.inject.registry import register
from stave.inject.unit import Applied, FixUnit, Param


def _apply(applied: Applied, params: dict[str, Any], machine: Machine) -> None:
    target = params["batch_size"]
    factors: list[float] = []

    def override(args: dict[str, Any]) -> None:
        size = args["batch_size"]
        if args["batch_sampler"] is not None or size is None:
            applied.note("left a loader alone: it batches with its own batch_sampler or batch_size=None")
            return
        if size == target:
            applied.note(f"a loader already had batch_size={target}")
            return
        factors.append(target / size)
        args["batch_size"] = target
        applied.hits += 1

    override_loader_args(applied, ORDER_BATCH_SIZE, override)
    if not params["scale_lr"]:
        return
    scaled: "weakref.WeakSet[torch.optim.Optimizer]" = weakref.WeakSet()

    def pre_step(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        # The linear scaling rule, from the first loader the fix changed.
        if opt in scaled or not factors:
            return
        scaled.add(opt)
        for group in opt.param_groups:
            if isinstance(group.get("lr"), float):
                group["lr"] *= factors[0]
        applied.note(f"learning rate scaled by {factors[0]:g} (linear scaling rule)")

    handle = optim_module.register_optimizer_step_pre_hook(pre_step)
    applied.on_undo(handle.remove)


BATCH_SIZE = register(FixUnit(
    id="batch_size",
    title="batch size",
    changes="DataLoader(batch_size=b): more samples per optimizer step, which changes what each step "
            "learns (and, with scale_lr, the learning rate by the same factor)",
    params=(Param("batch_size", "int", "samples per batch", required=True, minimum=1),
            Param("scale_lr", "bool", "scale each optimizer's learning rate by the batch factor", default=False)),
    apply=_apply,
    undo_doc="DataLoader.__init__ restored and the learning-rate hook removed (rates already scaled stay)",
    no_hit="the script built no DataLoader with a batch_size",
    model_input="batch_scale",
    numeric=True,
    changes_learning=True,
))
