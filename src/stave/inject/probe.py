"""What the child measures while the script runs: step ends, samples, the first losses and input statistics.

Light on purpose (no sampler thread, no per-phase timing): the child's numbers are compared
between runs, so the probe must cost the same in each and as little as possible. A step ends at
the first optimizer's ``step()`` (the one seen first), as the doctor counts steps. On a GPU the
probe synchronizes every :data:`SYNC_EVERY` steps so that windows of steps are timed with the GPU
work they queued, without turning every step into a synchronous one.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import torch
from torch.optim import optimizer as optim_module

from stave import device as dev
from stave.inject.outermost import Listener, has_parameters, is_training_call, listen

# Steps between synchronizations on a GPU (the step times in between are the host's view).
SYNC_EVERY = 10


class StopProbe(BaseException):
    """Raised at the step end when the run's step budget is spent (a BaseException, so the script's
    ``except Exception`` does not swallow it)."""


def _finite(value: float) -> float | None:
    """``value``, or None when it is not finite (JSON has no NaN; the parent reads None as NaN)."""
    return value if math.isfinite(value) else None


def _first_tensor(args: tuple[Any, ...]) -> torch.Tensor | None:
    for arg in args:
        if isinstance(arg, torch.Tensor):
            return arg
        if isinstance(arg, (list, tuple)) and arg and isinstance(arg[0], torch.Tensor):
            return arg[0]
        if isinstance(arg, dict):
            for value in arg.values():
                if isinstance(value, torch.Tensor):
                    return value
    return None


class StepProbe:
    """Installs the probe's hooks; :meth:`result` gives what it saw (JSON-ready)."""

    def __init__(self, steps: int | None, loss_steps: int, sync_every: int = SYNC_EVERY) -> None:
        self.steps = steps
        self.loss_steps = loss_steps
        self.sync_every = sync_every
        self.gpu = dev.cuda_available()
        self.main_thread = threading.get_ident()
        self.start_ns = 0
        self.step_end_ns: list[int] = []
        self.samples: list[int] = []
        self._step_samples: int | None = None
        self._losses: list[torch.Tensor] = []
        self._loss_taken = False
        # Per-channel sums of the first steps' inputs (float64): count, sum, sum of squares.
        self._stat_n = 0
        self._stat_sum: torch.Tensor | None = None
        self._stat_sq: torch.Tensor | None = None
        self._stats_usable = True
        self._step_opt: int | None = None
        self._undo: list[Any] = []

    # --- hooks ---

    def _enter(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        if self._step_samples is not None or not is_training_call(module) or not has_parameters(module):
            return None
        tensor = _first_tensor(args)
        self._step_samples = int(tensor.shape[0]) if tensor is not None and tensor.dim() > 0 else 0
        if len(self.step_end_ns) < self.loss_steps:
            self._add_stats(tensor)
        return None

    def _add_stats(self, x: torch.Tensor | None) -> None:
        if x is None or not x.is_floating_point() or x.dim() < 2 or not self._stats_usable:
            self._stats_usable = False
            return
        flat = x.detach().to(torch.float64).transpose(0, 1).reshape(x.shape[1], -1)
        if self._stat_sum is not None and self._stat_sum.shape[0] != flat.shape[0]:
            self._stats_usable = False
            return
        s, sq = flat.sum(dim=1), (flat * flat).sum(dim=1)
        self._stat_sum = s if self._stat_sum is None else self._stat_sum + s
        self._stat_sq = sq if self._stat_sq is None else self._stat_sq + sq
        self._stat_n += flat.shape[1]

    def _backward(self, original: Any) -> Any:
        probe = self

        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if (not probe._loss_taken and len(probe.step_end_ns) < probe.loss_steps
                    and isinstance(tensors, torch.Tensor) and tensors.dim() == 0):
                # Kept on its device: one transfer at the end, no sync per step.
                probe._losses.append(tensors.detach().float())
                probe._loss_taken = True
            return original(tensors, *args, **kwargs)

        return backward

    def _post_step(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if threading.get_ident() != self.main_thread:
            return
        if self._step_opt is None:
            self._step_opt = id(opt)
        if id(opt) != self._step_opt:
            return
        index = len(self.step_end_ns)
        if self.gpu and (index + 1) % self.sync_every == 0:
            dev.synchronize()
        self.step_end_ns.append(time.perf_counter_ns())
        self.samples.append(self._step_samples or 0)
        self._step_samples = None
        # A step without a scalar backward (a custom update) adds no loss: the list holds those seen.
        self._loss_taken = False
        if self.steps is not None and index + 1 >= self.steps:
            raise StopProbe()

    # --- lifecycle ---

    def install(self) -> None:
        """Register the hooks; the clock starts now."""
        self.start_ns = time.perf_counter_ns()
        self._undo.append(listen(Listener(self._enter, None)))
        handle = optim_module.register_optimizer_step_post_hook(self._post_step)
        self._undo.append(handle.remove)
        original = torch.autograd.backward
        torch.autograd.backward = self._backward(original)  # type: ignore[assignment]

        def restore() -> None:
            torch.autograd.backward = original  # type: ignore[assignment]

        self._undo.append(restore)

    def uninstall(self) -> None:
        """Remove the hooks (idempotent)."""
        while self._undo:
            self._undo.pop()()

    def result(self) -> dict[str, Any]:
        """Step end times (seconds since install), samples per step, first losses, input statistics."""
        if self.gpu:
            dev.synchronize()
        losses = [_finite(v) for v in torch.stack(self._losses).cpu().tolist()] if self._losses else []
        stats = None
        if self._stats_usable and self._stat_sum is not None and self._stat_sq is not None and self._stat_n > 1:
            mean = self._stat_sum / self._stat_n
            var = (self._stat_sq - self._stat_n * mean * mean) / (self._stat_n - 1)
            stats = [[_finite(float(m)), _finite(float(s))] for m, s in zip(mean.cpu(), var.clamp_min(0).sqrt().cpu())]
        return {
            "step_end_s": [(t - self.start_ns) / 1e9 for t in self.step_end_ns],
            "samples": list(self.samples),
            "losses": losses[: self.loss_steps],
            "input_stats": stats,
        }
