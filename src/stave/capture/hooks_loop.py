"""Hooks on the training loop: optimizer steps (the step boundary), forward, backward, zero_grad.

PyTorch's global hooks are used where they exist (optimizer pre/post step hooks, module forward
pre/post hooks); ``torch.autograd.backward``/``grad`` and ``zero_grad`` are wrapped. Every wrapper
calls the original unchanged, so the user's results are identical.

An outermost forward of a module that has trained before (seen in a forward with gradients on and
in ``train()`` mode) counts as evaluation (phase ``eval``) when it runs in ``eval()`` mode or under
``inference_mode``. A ``no_grad`` forward in ``train()`` mode is training work (a GAN's fakes for
its critic, pseudo-labels, RL rollouts), and a frozen teacher or a loss module never trains: their
forwards stay part of the training step. Each trained module also gets a forward
pre-hook with keyword arguments (the global hook sees positional ones only), which counts the rows
and tokens of its training inputs.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from typing import Any, Callable

import torch
from torch.nn.modules import module as nn_module
from torch.optim import optimizer as optim_module

from stave.capture.batch_walk import count_tokens, find_tokens, iter_tensors, seq_first
from stave.capture.pad_inference import LOSS_TYPES, PadEvidence, PadIdInference, loss_ignore_ids
from stave.capture.steps import StepTracker

log = logging.getLogger(__name__)


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
        self._trained: set[int] = set()
        self._input_hooks: dict[int, Any] = {}
        self._arg_names: dict[type, list[str]] = {}
        # Per trained model: whether it takes token ids sequence-first (batch_walk.seq_first).
        self._seq_first: dict[int, bool] = {}
        # Pad-id evidence per trained model, and the token ids that loss modules called outside
        # the model ignore (for plain models whose batches carry no mask: pad_inference.py).
        self._pads: dict[int, PadIdInference] = {}
        self._loss_ids: set[int] = set()

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
        if self._depth == 1 and isinstance(module, LOSS_TYPES):
            self._loss_ids |= loss_ignore_ids([module])
        if self._depth == 1:
            training = module.training and torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
            if training:
                self._trained.add(id(module))
            # Evaluation: a trained module in eval() mode, or under inference_mode (its outputs cannot
            # feed a backward). A no_grad forward in train() mode feeds training: a GAN's fakes for
            # its critic, a pseudo-label, a rollout, a target; evaluation loops call eval().
            evaluating = not module.training or torch.is_inference_mode_enabled()
            phase = "eval" if id(module) in self._trained and evaluating else "forward"
            self._forward_owned = self.tracker.enter(phase)
            if self._forward_owned:
                self.on_model(module)
                if training and id(module) not in self._input_hooks:
                    self._add_input_hook(module)

    def _fwd_post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if threading.get_ident() != self.tracker.main_thread_id:
            return
        self._depth = max(0, self._depth - 1)
        if self._depth == 0 and self._forward_owned:
            self._forward_owned = False
            self.tracker.exit(True)

    def _add_input_hook(self, module: torch.nn.Module) -> None:
        """Count this module's training inputs from its next call on (once per module)."""
        try:
            self._input_hooks[id(module)] = module.register_forward_pre_hook(self._count_inputs, with_kwargs=True)
        except (RuntimeError, AttributeError, TypeError) as exc:
            # A scripted module takes no Python hooks: its samples come from the loader alone.
            log.debug("no input hook on %s: %s", type(module).__name__, exc)
            self._input_hooks[id(module)] = None

    def _names(self, module: torch.nn.Module) -> list[str]:
        """Parameter names of ``module.forward``, so positional inputs get their names (``idx``)."""
        cls = type(module)
        if cls not in self._arg_names:
            try:
                params = inspect.signature(module.forward).parameters
                self._arg_names[cls] = [n for n, p in params.items() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            except (TypeError, ValueError):
                self._arg_names[cls] = []
        return self._arg_names[cls]

    def _is_seq_first(self, module: torch.nn.Module) -> bool:
        """:func:`~stave.capture.batch_walk.seq_first`, looked up once per model."""
        if id(module) not in self._seq_first:
            self._seq_first[id(module)] = seq_first(module)
        return self._seq_first[id(module)]

    def _count_inputs(self, module: torch.nn.Module, args: Any, kwargs: Any) -> None:
        """Rows and tokens of a training forward's inputs (outermost call only)."""
        if threading.get_ident() != self.tracker.main_thread_id or self._depth != 1 or self.tracker.active != "forward":
            return
        names = self._names(module)
        named = []
        for i, arg in enumerate(args):
            label = names[i] if i < len(names) else f"args[{i}]"
            named.extend(iter_tensors(arg, label))
        for key, value in (kwargs or {}).items():
            named.extend(iter_tensors(value, key))
        ids, mask = find_tokens(named)
        if ids is not None:
            if self._is_seq_first(module):
                # (positions, rows): rows are the columns (a view, no copy).
                ids = ids.t()
                mask = mask.t() if mask is not None and mask.dim() == 2 else mask
            pad_id = None
            if mask is None:
                pad_id = self._pads.setdefault(id(module), PadIdInference()).pad_id(module, ids, self._loss_ids)
            count = count_tokens(ids, mask, pad_id)
            self.tracker.add_model_input(count.rows, count)
        elif named and named[0][1].dim() > 0:
            first = named[0][1]
            batch_axis = 1 if self._is_seq_first(module) and first.dim() >= 2 else 0
            self.tracker.add_model_input(int(first.shape[batch_axis]), None)

    @property
    def pad_evidence(self) -> PadEvidence | None:
        """The pad id found for the first model that had one, and its source (None: none found)."""
        return next((p.evidence for p in self._pads.values() if p.evidence is not None), None)

    # --- install ---

    def _wrap_phase(self, owner: Any, name: str, phase: str, before: Callable[[], None] | None = None,
                    after: Callable[[], None] | None = None) -> None:
        """``owner.name`` timed as ``phase``, telling the tracker ``before`` it runs and ``after`` it returns."""
        original = getattr(owner, name)
        tracker = self.tracker

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if before is not None:
                before()
            owned = tracker.enter(phase)
            try:
                result = original(*args, **kwargs)
            finally:
                tracker.exit(owned)
            if after is not None:
                after()
            return result

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
        # Only loss.backward() accumulates into .grad (a hand-written update's sign, StepTracker.grads_zeroed);
        # autograd.grad returns its gradients (a gradient penalty inside the loss).
        self._wrap_phase(torch.autograd, "backward", "backward", after=self.tracker.grads_accumulated)
        self._wrap_phase(torch.autograd, "grad", "backward")
        # Clearing gradients is a hand-written update's step boundary (StepTracker.grads_zeroed).
        self._wrap_phase(torch.optim.Optimizer, "zero_grad", "optimizer", before=self.tracker.grads_zeroed)
        self._wrap_phase(torch.nn.Module, "zero_grad", "optimizer", before=self.tracker.grads_zeroed)

    def uninstall(self) -> None:
        """Remove everything :meth:`install` added (in reverse order)."""
        for handle in [*self._handles, *self._input_hooks.values()]:
            if handle is not None:
                handle.remove()
        self._handles = []
        self._input_hooks = {}
        while self._restore:
            self._restore.pop()()
