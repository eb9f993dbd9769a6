"""Process-wide GPU math settings: TF32 for fp32 matmuls/convolutions, and cuDNN autotuning.

Set through :mod:`stave.device` (the one module that touches torch.cuda) before the script runs. A
script that sets the flag itself afterwards wins: torch's flags are plain attributes.
"""

from __future__ import annotations

from typing import Any

from stave import device as dev
from stave.inject.machine import Machine
from stave.inject.registry import register
from stave.inject.unit import Applied, FixUnit


def _apply_tf32(applied: Applied, params: dict[str, Any], machine: Machine) -> None:
    if dev.tf32_enabled():
        applied.note("TF32 was already allowed")
        return
    previous = dev.set_tf32(True)
    applied.on_undo(lambda: dev.restore_tf32(previous))
    applied.hits += 1


def _tf32_applicable(params: dict[str, Any], machine: Machine) -> str | None:
    if not machine.bf16_native:
        return f"{machine.device_name} has no TF32 tensor cores (compute capability < 8.0)"
    return None


TF32 = register(FixUnit(
    id="tf32",
    title="TF32 matmuls",
    changes="torch.backends.cuda.matmul.allow_tf32 and cudnn.allow_tf32 = True: fp32 matmuls and "
            "convolutions on TF32 tensor cores (10-bit mantissa inputs)",
    params=(),
    apply=_apply_tf32,
    undo_doc="both flags set back",
    no_hit="TF32 was already allowed",
    model_input="phase_speed",
    numeric=True,
    gpu_only=True,
    applicable=_tf32_applicable,
))


def _apply_benchmark(applied: Applied, params: dict[str, Any], machine: Machine) -> None:
    if dev.cudnn_flags()["cudnn_benchmark"]:
        applied.note("cudnn.benchmark was already on")
        return
    previous = dev.set_cudnn_benchmark(True)
    applied.on_undo(lambda: dev.set_cudnn_benchmark(previous))
    applied.hits += 1


CUDNN_BENCHMARK = register(FixUnit(
    id="cudnn_benchmark",
    title="cudnn.benchmark",
    changes="torch.backends.cudnn.benchmark = True: cuDNN times its convolution algorithms once per "
            "input shape and keeps the fastest",
    params=(),
    apply=_apply_benchmark,
    undo_doc="the flag set back",
    no_hit="cudnn.benchmark was already on",
    model_input="phase_speed",
    gpu_only=True,
))
