"""How much memory a batch size needs, for the batch-size rung's cap on a CPU.

The tensors autograd saves for the backward pass dominate a training step's memory and grow
linearly with the batch. They are measured once, with ``saved_tensors_hooks`` over one forward at
the current batch size, and scaled to the candidate sizes.
"""

from __future__ import annotations

from typing import Any

import psutil
import torch

from stave.train.step import autocast_context

# The share of the available RAM the batch-size probe may plan to use on a CPU (issue 5: half the
# free RAM), leaving the rest for the loader workers, the page cache and the other configuration.
RAM_SHARE_FOR_BATCH = 0.5
# Autograd's saved tensors are most, not all, of a step's peak: gradients, optimizer state and
# temporaries come on top. Planning with this factor keeps the estimate on the safe side.
SAVED_TO_PEAK_FACTOR = 2.0


def saved_activation_bytes(
    model: torch.nn.Module, loss_fn: Any, inputs: Any, targets: torch.Tensor, precision: str
) -> int:
    """Bytes of the distinct storages autograd saves during one forward on this batch."""
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    def unpack(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        with autocast_context(targets.device.type, precision):
            loss = loss_fn(model(inputs), targets)
    del loss
    return sum(storages.values())


def cpu_batch_cap(bytes_per_sample: float, available_bytes: int | None = None) -> int:
    """Largest batch whose planned memory fits in :data:`RAM_SHARE_FOR_BATCH` of the available RAM."""
    available = psutil.virtual_memory().available if available_bytes is None else available_bytes
    if bytes_per_sample <= 0:
        return 1 << 30
    return max(1, int(available * RAM_SHARE_FOR_BATCH / (bytes_per_sample * SAVED_TO_PEAK_FACTOR)))
