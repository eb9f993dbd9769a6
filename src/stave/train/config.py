"""What the optimized training step does, as one validated, frozen configuration.

Every switch here is a rung of ``stave bench ladder``; the ladder keeps the ones that measurably
help on the user's machine and prints this dataclass (and the plain-PyTorch equivalent) as code.
A rung that brings a setting of its own registers a :class:`~stave.train.switches.Switch`;
``extras`` holds such settings' values, and :meth:`TrainConfig.with_changes` takes them by name.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from stave.errors import UsageError
from stave.train.switches import get_switch, registered_switches, reserve

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

    # metadata "numeric": the setting can change what the step computes (the ladder checks the loss).
    precision: str = field(default="fp32", metadata={"numeric": True})
    channels_last: bool = field(default=False, metadata={"numeric": True})
    compile: bool = field(default=False, metadata={"numeric": True})
    compile_mode: str | None = field(default=None, metadata={"numeric": True})
    set_to_none: bool = True
    optimizer_impl: str = field(default="default", metadata={"numeric": True})
    cuda_graphs: bool = field(default=False, metadata={"numeric": True})
    cudnn_benchmark: bool = field(default=False, metadata={"numeric": True})
    # Registered switches' values that differ from their defaults, as (name, value) sorted by name.
    extras: tuple[tuple[str, Any], ...] = ()

    @staticmethod
    def builtin_fields() -> tuple[str, ...]:
        """The settings declared here (not the registered switches)."""
        return tuple(f.name for f in fields(TrainConfig) if f.name != "extras")

    @staticmethod
    def accepts(name: str) -> bool:
        """Whether ``name`` is a setting of the step: a field here or a registered switch."""
        return name in TrainConfig.builtin_fields() or get_switch(name) is not None

    @staticmethod
    def numeric_settings() -> tuple[str, ...]:
        """The settings that can change what the step computes (fields and registered switches)."""
        own = tuple(f.name for f in fields(TrainConfig) if f.metadata.get("numeric"))
        return own + tuple(s.name for s in registered_switches() if s.numeric)

    def __post_init__(self) -> None:
        for name, _value in self.extras:
            if get_switch(name) is None:
                raise UsageError(f"{name!r} is not a setting of the training step (no such switch is registered)")
        # One spelling per configuration (configs are dict keys): sorted, defaults left out.
        kept = tuple(sorted((k, v) for k, v in self.extras if v != get_switch(k).default))  # type: ignore[union-attr]
        object.__setattr__(self, "extras", kept)
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
        """A copy with ``changes`` applied (validated again); registered switches by name too."""
        own = {k: v for k, v in changes.items() if k in self.builtin_fields()}
        extra = dict(self.extras)
        for name, value in changes.items():
            if name in own:
                continue
            switch = get_switch(name)
            if switch is None:
                raise UsageError(f"{name!r} is not a setting of the training step")
            extra[name] = value
        return replace(self, extras=tuple(extra.items()), **own)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of the settings (registered switches side by side with the fields)."""
        out = asdict(self)
        del out["extras"]
        out.update(dict(self.extras))
        return out

    def changed_fields(self) -> dict[str, Any]:
        """The settings that differ from the defaults (what a user has to write down)."""
        default = TrainConfig().to_dict()
        return {k: v for k, v in self.to_dict().items() if default.get(k) != v}


reserve(TrainConfig.builtin_fields())
