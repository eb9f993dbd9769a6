"""Watches ``torch.nn.functional.scaled_dot_product_attention``: how often, and with what inputs.

Which kernel ran (flash, memory-efficient, cuDNN, math) is read by the op counter from the aten op
the dispatcher chose; why a slower one was chosen depends on the inputs (dtype, an explicit mask,
the head dimension), recorded here from the first call of the run. The wrapper calls the original
with the same arguments.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import torch
import torch.nn.functional as F


def describe_sdpa_inputs(query: torch.Tensor, attn_mask: Any, dropout_p: float, is_causal: bool) -> dict[str, str]:
    """The inputs that decide the SDPA kernel, as strings (a JSON-safe record)."""
    return {
        "dtype": str(query.dtype).replace("torch.", ""),
        "device": query.device.type,
        "head_dim": str(int(query.shape[-1])),
        "attn_mask": "none" if attn_mask is None else str(getattr(attn_mask, "dtype", type(attn_mask).__name__)).replace("torch.", ""),
        "is_causal": str(bool(is_causal)),
        "dropout": str(float(dropout_p) > 0),
    }


class AttentionHooks:
    """Wraps ``F.scaled_dot_product_attention`` while installed."""

    def __init__(self, main_thread_id: int) -> None:
        self.main_thread_id = main_thread_id
        self.calls = 0
        self.first_inputs: dict[str, str] = {}
        self._original: Any = None

    def install(self) -> None:
        """Replace the function on ``torch.nn.functional`` (where HF and most models look it up)."""
        original = self._original = F.scaled_dot_product_attention
        hooks = self

        @functools.wraps(original)
        def wrapper(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                    is_causal: bool = False, *args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == hooks.main_thread_id:
                hooks.calls += 1
                if not hooks.first_inputs and isinstance(query, torch.Tensor):
                    hooks.first_inputs = describe_sdpa_inputs(query, attn_mask, dropout_p, is_causal)
            return original(query, key, value, attn_mask, dropout_p, is_causal, *args, **kwargs)

        F.scaled_dot_product_attention = wrapper

    def uninstall(self) -> None:
        """Put the original back."""
        if self._original is not None:
            F.scaled_dot_product_attention = self._original
            self._original = None
