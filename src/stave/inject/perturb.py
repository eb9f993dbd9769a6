"""The loss check's yardstick: the same run with the model's initial weights rounded to bf16.

How far that moves the first losses measures how strongly this job amplifies a tiny numeric change
(the ladder's check, :mod:`stave.bench.losscheck`, scales its tolerance the same way). The weights
of each trained module are rounded in place at its first training call, before any update.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from stave.inject.outermost import Listener, has_parameters, is_training_call, listen


def round_weights_to_bf16() -> Callable[[], None]:
    """Round each trained module's floating parameters to bf16 (and back) at its first training
    call; returns the function that stops it."""
    done: set[int] = set()

    def enter(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        if id(module) in done or not is_training_call(module) or not has_parameters(module):
            return None
        done.add(id(module))
        with torch.no_grad():
            for p in module.parameters():
                if p.is_floating_point():
                    p.copy_(p.to(torch.bfloat16).to(p.dtype))
        return None

    return listen(Listener(enter, None))
