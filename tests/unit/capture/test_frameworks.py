"""Which framework drives the loop, from the stack's files and the script; the installed switches."""

from __future__ import annotations

import dataclasses
import os
import sys
import types

from stave.capture import frameworks

SITE = f"{os.sep}venv{os.sep}lib{os.sep}site-packages{os.sep}"


def test_framework_from_stack_files_most_specific_first():
    hf = [f"{SITE}torch{os.sep}optim{os.sep}optimizer.py", f"{SITE}accelerate{os.sep}optimizer.py",
          f"{SITE}transformers{os.sep}trainer.py", "/home/u/train.py"]
    assert frameworks.framework_from_files(hf) == "hf_trainer"
    lit = [f"{SITE}lightning{os.sep}pytorch{os.sep}loops{os.sep}optimization{os.sep}automatic.py"]
    assert frameworks.framework_from_files(lit) == "lightning"
    assert frameworks.framework_from_files([f"{SITE}pytorch_lightning{os.sep}core{os.sep}module.py"]) == "lightning"
    assert frameworks.framework_from_files([f"{SITE}accelerate{os.sep}optimizer.py"]) == "accelerate"
    assert frameworks.framework_from_files(["/home/u/train.py", f"{SITE}torch{os.sep}optim{os.sep}adamw.py"]) is None


def test_timm_script_needs_timm_loaded_and_its_amp_dtype_flag(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("parser.add_argument('--amp-dtype', default='float16')\n")
    assert frameworks.is_timm_script(str(script), {"timm": object()})
    assert not frameworks.is_timm_script(str(script), {})
    plain = tmp_path / "mine.py"
    plain.write_text("import timm\n")
    assert not frameworks.is_timm_script(str(plain), {"timm": object()})
    assert not frameworks.is_timm_script(str(tmp_path / "missing.py"), {"timm": object()})


def _fake_transformers(monkeypatch, fields: list[str]) -> None:
    args_cls = dataclasses.make_dataclass("TrainingArguments", [(f, int, 0) for f in fields])
    monkeypatch.setitem(sys.modules, "transformers", types.SimpleNamespace(TrainingArguments=args_cls, __version__="x"))


def test_group_by_length_switch_follows_the_installed_training_arguments(monkeypatch):
    _fake_transformers(monkeypatch, ["output_dir", "train_sampling_strategy"])
    assert frameworks.framework_options("hf_trainer") == {"group_by_length": "train_sampling_strategy"}
    _fake_transformers(monkeypatch, ["output_dir", "group_by_length"])
    assert frameworks.framework_options("hf_trainer") == {"group_by_length": "group_by_length"}
    assert frameworks.framework_options("lightning") == {}
    assert frameworks.package_version("hf_trainer") == "x"


def test_detect_on_a_plain_stack_is_none():
    assert frameworks.detect(sys._getframe(), "") == (None, None, {})
