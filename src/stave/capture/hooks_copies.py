"""Hooks on host<->device copies and on calls that make the host wait for the GPU.

``Tensor.to`` is wrapped everywhere (on a CPU-only machine it sees no device copies and only
passes through). With CUDA present, ``Tensor.cuda``/``copy_`` are wrapped too, and so are the calls
that synchronize: ``.item()``, ``.tolist()``, ``.cpu()`` on CUDA tensors and
``torch.cuda.synchronize``/``empty_cache`` (through ``stave.device``), each counted per user
source line.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import torch

from stave import device as dev
from stave.capture.steps import StepTracker
from stave.monitor.stacks import is_user_file
from stave.measure.pipeline import CopyStat, SyncSite


def _target_device(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.device | None:
    target = kwargs.get("device")
    if target is None and args:
        first = args[0]
        if isinstance(first, (str, torch.device)):
            target = first
        elif isinstance(first, int) and not isinstance(first, bool):
            target = torch.device("cuda", first)
        elif isinstance(first, torch.Tensor):
            target = first.device
    if target is None:
        return None
    try:
        return torch.device(target)
    except (RuntimeError, TypeError):
        return None


def _non_blocking(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if "non_blocking" in kwargs:
        return bool(kwargs["non_blocking"])
    # Positional form: to(device, dtype, non_blocking, copy) / to(other, non_blocking, copy).
    for arg in args[1:]:
        if isinstance(arg, bool):
            return arg
    return False


def caller_site() -> tuple[str, int, str]:
    """The innermost frame of the user's own code calling into us (file, line, function)."""
    frame = sys._getframe(2)
    fallback = (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name
        frame = frame.f_back
    return fallback


class CopyHooks:
    """Installs the copy and sync wrappers; aggregates :class:`CopyStat` and :class:`SyncSite`."""

    def __init__(self, tracker: StepTracker) -> None:
        self.tracker = tracker
        self.copies: dict[tuple[str, str, bool, bool], CopyStat] = {}
        self.syncs: dict[tuple[str, str, int], SyncSite] = {}
        self._sync_last_step: dict[tuple[str, str, int], int] = {}
        self.cuda_calls: dict[str, int] = {}
        self._restore: list[Callable[[], None]] = []

    def record_copy(self, direction: str, src: torch.Tensor, non_blocking: bool, host_ns: int) -> None:
        """Aggregate one copy (also used by tests to exercise the GPU path's bookkeeping)."""
        pinned = dev.is_pinned(src) if direction == "h2d" else False
        key = (direction, str(src.dtype).replace("torch.", ""), pinned, non_blocking)
        stat = self.copies.get(key)
        if stat is None:
            stat = self.copies[key] = CopyStat(direction, key[1], pinned, non_blocking)
        nbytes = src.numel() * src.element_size()
        stat.count += 1
        stat.nbytes += nbytes
        stat.host_ns += host_ns
        if direction == "h2d":
            self.tracker.add_to_active(nbytes=nbytes)

    def record_sync(self, kind: str) -> None:
        """Count one synchronizing call at the user's calling line."""
        file, line, function = caller_site()
        key = (kind, file, line)
        site = self.syncs.get(key)
        if site is None:
            site = self.syncs[key] = SyncSite(kind, file, line, function)
        site.calls += 1
        step = self.tracker.step_index
        if self._sync_last_step.get(key) != step:
            self._sync_last_step[key] = step
            site.steps_with_call += 1

    def _count_cuda_call(self, name: str) -> None:
        self.cuda_calls[name] = self.cuda_calls.get(name, 0) + 1
        if name == "synchronize":
            self.record_sync("torch.cuda.synchronize")

    def _patch(self, owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        original = getattr(owner, name)
        wrapper = functools.wraps(original)(make(original))
        setattr(owner, name, wrapper)
        self._restore.append(lambda: setattr(owner, name, original))

    def install(self) -> None:
        """Wrap ``Tensor.to`` always; the CUDA-only calls when CUDA is present."""
        tracker = self.tracker
        hooks = self

        def make_to(original: Callable[..., Any]) -> Callable[..., Any]:
            def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
                target = _target_device(args, kwargs)
                if target is None or target.type == self.device.type:
                    return original(self, *args, **kwargs)
                direction = "h2d" if self.device.type == "cpu" else "d2h" if target.type == "cpu" else "d2d"
                owned = tracker.enter("h2d") if direction == "h2d" else False
                start = tracker.clock.mark().host_ns
                try:
                    return original(self, *args, **kwargs)
                finally:
                    # Recorded before the phase closes: the copy's bytes belong to the h2d phase it
                    # opened (recorded after, they found no open phase and every step read 0 bytes).
                    nb = _non_blocking(args, kwargs)
                    try:
                        hooks.record_copy(direction, self, nb, tracker.clock.mark().host_ns - start)
                    finally:
                        tracker.exit(owned)
                    if direction == "d2h" and not nb:
                        hooks.record_sync(".to('cpu')")

            return to

        self._patch(torch.Tensor, "to", make_to)
        if not dev.cuda_available():
            return

        def make_cuda(original: Callable[..., Any]) -> Callable[..., Any]:
            def cuda(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
                if self.device.type != "cpu":
                    return original(self, *args, **kwargs)
                owned = tracker.enter("h2d")
                start = tracker.clock.mark().host_ns
                try:
                    return original(self, *args, **kwargs)
                finally:
                    nb = bool(kwargs.get("non_blocking", args[1] if len(args) > 1 else False))
                    try:
                        hooks.record_copy("h2d", self, nb, tracker.clock.mark().host_ns - start)
                    finally:
                        tracker.exit(owned)

            return cuda

        def make_copy(original: Callable[..., Any]) -> Callable[..., Any]:
            def copy_(self: torch.Tensor, src: Any, *args: Any, **kwargs: Any) -> Any:
                if not (isinstance(src, torch.Tensor) and self.is_cuda and src.device.type == "cpu"):
                    return original(self, src, *args, **kwargs)
                owned = tracker.enter("h2d")
                start = tracker.clock.mark().host_ns
                try:
                    return original(self, src, *args, **kwargs)
                finally:
                    nb = bool(kwargs.get("non_blocking", args[0] if args else False))
                    try:
                        hooks.record_copy("h2d", src, nb, tracker.clock.mark().host_ns - start)
                    finally:
                        tracker.exit(owned)

            return copy_

        def make_sync(kind: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
            def make(original: Callable[..., Any]) -> Callable[..., Any]:
                def synced(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
                    if self.is_cuda:
                        hooks.record_sync(kind)
                    return original(self, *args, **kwargs)

                return synced

            return make

        self._patch(torch.Tensor, "cuda", make_cuda)
        self._patch(torch.Tensor, "copy_", make_copy)
        self._patch(torch.Tensor, "item", make_sync(".item()"))
        self._patch(torch.Tensor, "tolist", make_sync(".tolist()"))
        self._patch(torch.Tensor, "cpu", make_sync(".cpu()"))
        self._restore.append(dev.install_cuda_call_counter(self._count_cuda_call))

    def uninstall(self) -> None:
        """Restore the originals (reverse order)."""
        while self._restore:
            self._restore.pop()()
