"""The outermost module calls of the main thread: one pair of global forward hooks shared by every listener.

Autocast, channels_last and torch.compile act on the model's outermost call (the call the training
loop makes), and the child's probe reads that call's inputs. Nested submodule calls are left
alone. The hooks are installed with the first listener and removed with the last.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.nn.modules import module as nn_module

# on_enter(module, args) -> replacement args or None; on_exit(module, args, output) -> replacement output or None.
EnterFn = Callable[[torch.nn.Module, tuple[Any, ...]], "tuple[Any, ...] | None"]
ExitFn = Callable[[torch.nn.Module, tuple[Any, ...], Any], Any]


@dataclass(eq=False)
class Listener:
    """What one user of the outermost calls wants to hear (either side may be None)."""

    on_enter: EnterFn | None = None
    on_exit: ExitFn | None = None


class _Outermost:
    def __init__(self) -> None:
        self.listeners: list[Listener] = []
        self.handles: list[Any] = []
        self.depth = 0
        self.main_thread = threading.main_thread().ident

    def _pre(self, module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        # Inside a compiled forward every call is nested: nothing to do, and nothing for dynamo to trace.
        if torch.compiler.is_compiling() or threading.get_ident() != self.main_thread:
            return None
        self.depth += 1
        if self.depth != 1:
            return None
        changed = None
        for listener in list(self.listeners):
            if listener.on_enter is not None:
                new = listener.on_enter(module, args if changed is None else changed)
                if new is not None:
                    changed = new
        return changed

    def _post(self, module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        if torch.compiler.is_compiling() or threading.get_ident() != self.main_thread:
            return None
        self.depth = max(0, self.depth - 1)
        if self.depth != 0:
            return None
        changed = None
        # Exits in reverse order: the listener that entered last leaves first (nested contexts).
        for listener in reversed(list(self.listeners)):
            if listener.on_exit is not None:
                new = listener.on_exit(module, args, output if changed is None else changed)
                if new is not None:
                    changed = new
        return changed

    def add(self, listener: Listener) -> None:
        if not self.handles:
            self.depth = 0
            self.main_thread = threading.get_ident()
            self.handles = [
                nn_module.register_module_forward_pre_hook(self._pre),
                # always_call: the exit runs even when forward raises, so a context never leaks.
                nn_module.register_module_forward_hook(self._post, always_call=True),
            ]
        self.listeners.append(listener)

    def remove(self, listener: Listener) -> None:
        if listener in self.listeners:
            self.listeners.remove(listener)
        if not self.listeners:
            for handle in self.handles:
                handle.remove()
            self.handles = []


_OUTERMOST = _Outermost()


def listen(listener: Listener) -> Callable[[], None]:
    """Call ``listener`` on every outermost module call of this thread; returns the function that stops it."""
    _OUTERMOST.add(listener)
    return lambda: _OUTERMOST.remove(listener)


def is_training_call(module: torch.nn.Module) -> bool:
    """A call that trains: module in train() mode, gradients on, not inference mode."""
    return module.training and torch.is_grad_enabled() and not torch.is_inference_mode_enabled()


def has_parameters(module: torch.nn.Module) -> bool:
    """Whether ``module`` holds any parameter (a loss module usually does not)."""
    return next(module.parameters(), None) is not None
