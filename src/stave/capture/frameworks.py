"""Which training framework drives the loop: Lightning, the Hugging Face Trainer, accelerate, timm.

Read from what runs, not from what is merely installed: the Python stack at the first
``optimizer.step()`` (Lightning's loops, ``transformers/trainer.py``, accelerate's wrapped
optimizer), and for timm's ``train.py`` (whose loop is the script itself) the loaded ``timm``
package together with the script's own ``--amp-dtype`` flag. The installed version's switches are
read too, so a fix names the switch that version accepts (``TrainingArguments`` renamed
``group_by_length`` to ``train_sampling_strategy`` in transformers 5).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

# Most specific first: the HF Trainer runs on accelerate, Lightning may run on either's pieces.
# (framework, path fragment of a frame's file that only that framework's loop has)
STACK_MARKERS: tuple[tuple[str, str], ...] = (
    ("lightning", f"{os.sep}lightning{os.sep}pytorch{os.sep}"),
    ("lightning", f"{os.sep}pytorch_lightning{os.sep}"),
    ("hf_trainer", f"{os.sep}transformers{os.sep}trainer.py"),
    ("accelerate", f"{os.sep}accelerate{os.sep}"),
)
# The package whose version is reported for each framework.
PACKAGES = {"lightning": "lightning", "hf_trainer": "transformers", "accelerate": "accelerate", "timm": "timm"}
# How deep the stack walk goes from the optimizer hook: the loops nest a few dozen frames deep.
MAX_FRAMES = 200


def framework_from_files(files: list[str]) -> str | None:
    """The framework whose loop code is among ``files`` (a stack's frame files), most specific first."""
    for name, marker in STACK_MARKERS:
        if any(marker in f for f in files):
            return name
    return None


def stack_files(frame: FrameType | None) -> list[str]:
    """File names of ``frame`` and its callers."""
    files = []
    while frame is not None and len(files) < MAX_FRAMES:
        files.append(frame.f_code.co_filename)
        frame = frame.f_back
    return files


def is_timm_script(script: str, modules: Any = None) -> bool:
    """True for timm's ``train.py`` (or a copy of it): timm is loaded and the script has ``--amp-dtype``."""
    modules = sys.modules if modules is None else modules
    if "timm" not in modules or not script or not os.path.isfile(script):
        return False
    try:
        with open(script, encoding="utf-8", errors="replace") as fh:
            return "--amp-dtype" in fh.read(1_000_000)
    except OSError as exc:
        log.debug("cannot read %s: %s", script, exc)
        return False


def package_version(framework: str) -> str | None:
    """The loaded version of ``framework``'s package, if it is loaded."""
    module = sys.modules.get(PACKAGES.get(framework, ""))
    version = getattr(module, "__version__", None)
    return str(version) if version is not None else None


def framework_options(framework: str) -> dict[str, str]:
    """Switches of the installed framework that fixes need to name correctly.

    ``group_by_length``: the ``TrainingArguments`` field that groups samples by length
    (``train_sampling_strategy`` in transformers 5, ``group_by_length`` in 4).
    """
    out: dict[str, str] = {}
    if framework == "hf_trainer":
        module = sys.modules.get("transformers")
        args_cls = getattr(module, "TrainingArguments", None) if module is not None else None
        if args_cls is not None and dataclasses.is_dataclass(args_cls):
            names = {f.name for f in dataclasses.fields(args_cls)}
            if "train_sampling_strategy" in names:
                out["group_by_length"] = "train_sampling_strategy"
            elif "group_by_length" in names:
                out["group_by_length"] = "group_by_length"
    return out


def detect(frame: FrameType | None, script: str) -> tuple[str | None, str | None, dict[str, str]]:
    """(framework, its version, its option names) from the stack at an optimizer step and the script."""
    name = framework_from_files(stack_files(frame))
    if name is None and is_timm_script(script):
        name = "timm"
    if name is None:
        return None, None, {}
    return name, package_version(name), framework_options(name)
