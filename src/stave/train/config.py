"""What the optimized training step does, as one validated, frozen configuration.

Every switch here is a rung of ``stave bench ladder``; the ladder keeps the ones that measurably
help on the user's machine and prints this dataclass (and the plain-PyTorch equivalent) as code.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from stave.errors import UsageError

PRECISIONS = ("fp32", "bf16", "fp16")
OPTIMIZER_IMPLS = ("default", "foreach", "fused")
COMPILE_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass(frozen=True)
class TrainConfig:
    """Settings of :func:`stave.train.train_step` and :func:`stave.train.build_step`.

    - ``precision``: "fp32" (no autocast), "bf16" (autocast to bfloat16, no scaler needed) or
      "fp16" (autocast to float16 with a ``GradScaler``; GPUs without bf16).
    - ``channels_last``: model weights and image batches in NHWC, which cuDNN's tensor-core and
      oneDNN's bf16/AMX convolutions use without a reorder on every call.
    - ``compile``: wrap the model in ``torch.compile`` (``compile_mode`` as torch takes it).
    - ``set_to_none``: ``optimizer.zero_grad(set_to_none=...)``; True frees the gradients instead
      of writing zeros into them (the default since torch 2.0).
    - ``optimizer_impl``: "default" (whatever torch picks), "foreach" (one kernel per parameter
      group and op instead of one per tensor) or "fused" (one kernel for the whole update).
    - ``cuda_graphs``: replay forward and backward as a captured CUDA graph (GPU only; static
      shapes; no host sync inside the step).
    - ``cudnn_benchmark``: let cuDNN time its convolution algorithms once per shape (GPU only).
    """

    precision: str = "fp32"
    channels_last: bool = False
    compile: bool = False
    compile_mode: str | None = None
    set_to_none: bool = True
    optimizer_impl: str = "default"
    cuda_graphs: bool = False
    cudnn_benchmark: bool = False

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise UsageError(f"precision {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        if self.optimizer_impl not in OPTIMIZER_IMPLS:
            raise UsageError(f"optimizer_impl {self.optimizer_impl!r} is not one of {', '.join(OPTIMIZER_IMPLS)}")
        if self.compile_mode not in COMPILE_MODES:
            allowed = ", ".join(str(m) for m in COMPILE_MODES)
            raise UsageError(f"compile_mode {self.compile_mode!r} is not one of {allowed}")
        if self.compile_mode is not None and not self.compile:
            raise UsageError("compile_mode is set but compile is False; set compile=True or drop compile_mode")

    def with_changes(self, **changes: Any) -> "TrainConfig":
        """A copy with ``changes`` applied (validated again)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of the settings."""
        return asdict(self)

    def changed_fields(self) -> dict[str, Any]:
        """The settings that differ from the defaults (what a user has to write down)."""
        default = TrainConfig()
        return {k: v for k, v in asdict(self).items() if getattr(default, k) != v}
