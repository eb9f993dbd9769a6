"""Hooks on the training loop: optimizer steps (the step boundary), forward, backward, zero_grad.

PyTorch's global hooks are used where they exist (optimizer pre/post step hooks, module forward
pre/post hooks); ``torch.autograd.backward``/``grad`` and ``zero_grad`` are wrapped. Every wrapper
calls the original unchanged, so the user's results are identical.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable

import torch
from torch.nn.modules import module as nn_module
from torch.optim import optimizer as optim_module

from stave.capture.steps import StepTracker


class LoopHooks:
    """Installs and removes the loop hooks; reports to a :class:`StepTracker`.

    ``on_optimizer(opt)`` and ``on_model(module)`` are called for each optimizer step and each
    outermost module call, for the configuration snapshot (cheap: they dedupe by id).
    """

    def __init__(
        self,
        tracker: StepTracker,
        on_optimizer: Callable[[torch.optim.Optimizer], None],
        on_model: Callable[[torch.nn.Module], None],
    ) -> None:
        self.tracker = tracker
        self.on_optimizer = on_optimizer
        self.on_model = on_model
        self._handles: list[Any] = []
        self._restore: list[Callable[[], None]] = []
        self._depth = 0
        self._forward_owned = False
        self._optimizer_owned = False
        self.optimizer_steps = 0

    # --- optimizer ---

    def _opt_pre(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if threading.get_ident() != self.tracker.main_thread_id:
            return
        self.optimizer_steps += 1
        self.on_optimizer(opt)
        self.tracker.optimizer_pre(id(opt))
        self._optimizer_owned = self.tracker.enter("optimizer")

    def _opt_post(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if threading.get_ident() != self.tracker.main_thread_id:
            return
        self.tracker.exit(self._optimizer_owned)
        self._optimizer_owned = False
        self.tracker.optimizer_post(id(opt))

    # --- forward ---

    def _fwd_pre(self, module: torch.nn.Module, args: Any) -> None:
        if threading.get_ident() != self.tracker.main_thread_id:
            return
        self._depth += 1
        if self._depth == 1:
            self._forward_owned = self.tracker.enter("forward")
            if self._forward_owned:
                self.on_model(module)

    def _fwd_post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if threading.get_ident() != self.tracker.main_thread_id:
            return
        self._depth = max(0, self._depth - 1)
        if self._depth == 0 and self._forward_owned:
            self._forward_owned = False
            self.tracker.exit(True)

    # --- install ---

    def _wrap_phase(self, owner: Any, name: str, phase: str) -> None:
        original = getattr(owner, name)
        tracker = self.tracker

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            owned = tracker.enter(phase)
            try:
                return original(*args, **kwargs)
            finally:
                tracker.exit(owned)

        setattr(owner, name, wrapper)
        self._restore.append(lambda: setattr(owner, name, original))

    def install(self) -> None:
        """Register the hooks and wrappers."""
        self._handles = [
            optim_module.register_optimizer_step_pre_hook(self._opt_pre),
            optim_module.register_optimizer_step_post_hook(self._opt_post),
            nn_module.register_module_forward_pre_hook(self._fwd_pre),
            # always_call: the post hook runs even when forward raises, so the phase never leaks.
            nn_module.register_module_forward_hook(self._fwd_post, always_call=True),
        ]
        self._wrap_phase(torch.autograd, "backward", "backward")
        self._wrap_phase(torch.autograd, "grad", "backward")
        self._wrap_phase(torch.optim.Optimizer, "zero_grad", "optimizer")
        self._wrap_phase(torch.nn.Module, "zero_grad", "optimizer")

    def uninstall(self) -> None:
        """Remove everything :meth:`install` added (in reverse order)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        while self._restore:
            self._restore.pop()()
