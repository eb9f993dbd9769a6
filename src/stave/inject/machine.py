"""What a fix may look at before the script runs, to decide whether it applies here."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from stave import device as dev
from stave.train.precision import best_precision


@dataclass(frozen=True)
class Machine:
    """The device and host facts fixes depend on (built once per process by :func:`this_machine`).

    ``precision``: the reduced precision the device runs natively ("bf16", "fp16", None) and
    ``precision_reason`` why. ``has_compiler``: a C++ compiler for inductor's CPU code.
    """

    cuda: bool
    device_name: str
    bf16_native: bool
    fp16_tensor_cores: bool
    cores: int
    has_compiler: bool
    precision: str | None = None
    precision_reason: str = ""


def this_machine() -> Machine:
    """The machine this process runs on."""
    info = dev.describe_device(None)
    precision, reason = best_precision(None)
    compiler = os.environ.get("CXX") or "c++"
    return Machine(
        cuda=info.type == "cuda",
        device_name=info.name,
        bf16_native=info.bf16_native,
        fp16_tensor_cores=info.fp16_tensor_cores,
        cores=dev.usable_cores(),
        has_compiler=shutil.which(compiler) is not None or shutil.which("g++") is not None,
        precision=precision,
        precision_reason=reason,
    )
