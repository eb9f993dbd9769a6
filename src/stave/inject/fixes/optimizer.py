"""The optimizer's implementation (foreach / fused) and ``zero_grad(set_to_none=True)``.

Both keep the update's math: foreach and fused compute the same update as the for-loop (in a
different summation order at most), and dropping gradients instead of zeroing them changes nothing
the optimizer reads.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import torch
from torch.optim import optimizer as optim_module

from stave.errors import UsageError
from stave.inject.machine import Machine
from stave.inject.patches import patch_attr
from stave.inject.registry import register
from stave.inject.unit import Applied, FixUnit, Param
from stave.train.optim import current_impl, supported_impls, with_impl

# Attributes the constructor sets from the implementation flags (fused Adam's), copied over from a
# validated rebuild so the switched optimizer behaves as one built with them.
_IMPL_ATTRS = ("_step_supports_amp_scaling", "_need_device_dtype_check_for_fused")


def switch_impl(opt: torch.optim.Optimizer, impl: str) -> dict[str, Any]:
    """Switch ``opt`` in place to ``impl`` before its first step; returns what to restore.

    torch builds a throwaway optimizer with the flags first (:func:`stave.train.optim.with_impl`),
    so a refusal (fused on an unsupported device or dtype) raises :class:`UsageError` here and
    leaves ``opt`` untouched.
    """
    rebuilt = with_impl(opt, impl)
    saved = {"groups": [(g.get("foreach"), g.get("fused")) for g in opt.param_groups],
             "defaults": (opt.defaults.get("foreach"), opt.defaults.get("fused")),
             "attrs": {a: getattr(opt, a) for a in _IMPL_ATTRS if hasattr(opt, a)}}
    flags = {"foreach": impl == "foreach", "fused": impl == "fused"}
    for group in opt.param_groups:
        group.update(flags)
    opt.defaults.update(flags)
    for attr in _IMPL_ATTRS:
        if hasattr(rebuilt, attr):
            setattr(opt, attr, getattr(rebuilt, attr))
    return saved


def restore_impl(opt: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """Undo :func:`switch_impl`."""
    for group, (foreach, fused) in zip(opt.param_groups, saved["groups"]):
        group["foreach"], group["fused"] = foreach, fused
    opt.defaults["foreach"], opt.defaults["fused"] = saved["defaults"]
    for attr, value in saved["attrs"].items():
        setattr(opt, attr, value)


def _apply_impl(applied: Applied, params: dict[str, Any], machine: Machine) -> None:
    impl = params["impl"]
    seen: "weakref.WeakKeyDictionary[torch.optim.Optimizer, dict[str, Any] | None]" = weakref.WeakKeyDictionary()

    def pre_step(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if opt in seen:
            return
        seen[opt] = None
        name = type(opt).__name__
        if opt.state:
            applied.note(f"{name} had state before its first step was seen: left as it is")
        elif current_impl(opt) == impl:
            applied.note(f"{name} already uses {impl}")
        elif impl not in supported_impls(opt):
            applied.note(f"{name} has no {impl} implementation")
        else:
            try:
                seen[opt] = switch_impl(opt, impl)
                applied.hits += 1
            except UsageError as exc:
                applied.note(str(exc))

    handle = optim_module.register_optimizer_step_pre_hook(pre_step)

    def undo() -> None:
        handle.remove()
        for opt, saved in list(seen.items()):
            if saved is not None:
                restore_impl(opt, saved)

    applied.on_undo(undo)


OPTIMIZER_IMPL = register(FixUnit(
    id="optimizer_impl",
    title="foreach/fused optimizer",
    changes="each optimizer switched to its foreach or fused implementation before its first step "
            "(same hyper-parameters, same update)",
    params=(Param("impl", "str", "foreach or fused", default="fused", choices=("foreach", "fused")),),
    apply=_apply_impl,
    undo_doc="the step hook removed and the switched optimizers' flags set back",
    no_hit="no optimizer could be switched (already using it, no such implementation, or state before the first step)",
    model_input="phases_s.optimizer",
))


def _apply_set_to_none(applied: Applied, params: dict[str, Any], machine: Machine) -> None:
    for owner in (torch.optim.Optimizer, torch.nn.Module):
        original = owner.zero_grad

        def zero_grad(self: Any, set_to_none: bool = True, _original: Any = original) -> None:
            if not set_to_none:
                applied.hits += 1
            _original(self, set_to_none=True)

        patch_attr(applied, owner, "zero_grad", functools.wraps(original)(zero_grad))


SET_TO_NONE = register(FixUnit(
    id="set_to_none",
    title="zero_grad(set_to_none=True)",
    changes="Optimizer.zero_grad and Module.zero_grad drop gradients (set_to_none=True) even when the "
            "script passes False (classes that override zero_grad are not changed)",
    params=(),
    apply=_apply_set_to_none,
    undo_doc="Optimizer.zero_grad and Module.zero_grad restored",
    no_hit="the script never called zero_grad(set_to_none=False)",
    model_input="phases_s.optimizer",
))
