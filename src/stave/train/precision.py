"""Which reduced precision a device runs natively: the autocast dtype the ladder tries.

bf16 keeps fp32's exponent range, so it needs no loss scaling; fp16 needs a ``GradScaler``. On a
CPU, bf16 only pays with native instructions (AVX512-BF16, AMX, Arm BF16); emulated through fp32
it is slower than fp32, so no precision is proposed there.
"""

from __future__ import annotations

import torch

from stave import device as dev


def best_precision(device: str | torch.device | None) -> tuple[str | None, str]:
    """(precision to try, why): "bf16", "fp16", or None with the reason none fits this device."""
    info = dev.describe_device(device)
    if info.type == "cuda":
        if info.bf16_native:
            return "bf16", f"{info.name} computes bf16 natively (compute capability >= 8.0)"
        if info.fp16_tensor_cores:
            return "fp16", f"{info.name} has fp16 tensor cores but no bf16; fp16 needs a GradScaler"
        return "fp16", f"{info.name} has neither bf16 nor tensor cores; fp16 halves memory traffic only"
    if info.type == "cpu":
        if info.bf16_native:
            return "bf16", "this CPU has native bf16 instructions (AVX512-BF16/AMX or Arm BF16)"
        return None, "this CPU has no native bf16 (no AVX512-BF16/AMX); emulated bf16 is slower than fp32"
    return None, f"no known reduced precision for device type {info.type!r}"
