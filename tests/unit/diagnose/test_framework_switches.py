"""The framework-native fixes name switches that exist: timm's flags as verified in its source, and
the keyword arguments of Lightning, transformers and accelerate as the installed packages define them."""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing

import pytest

from stave.diagnose import framework_fixes as ff

# timm's train.py argparse flags, read at huggingface/pytorch-image-models commit
# aa4b5850c1543fa488abf260f18390eda46cf85d (2026-08-08): each is a real option there, with the value
# forms used below (--amp-dtype takes 'float16' or 'bfloat16'; --opt-kwargs parses key=value with
# ast.literal_eval; --torchcompile takes an optional backend, inductor by default; without --lr the
# lr is --lr-base scaled to the global batch).
TIMM_FLAGS = {"--amp", "--amp-dtype", "--workers", "--pin-mem", "--torchcompile", "--opt", "--opt-kwargs",
              "--batch-size", "--grad-accum-steps", "--val-interval", "--lr", "--lr-base"}
TIMM_EXACT = {
    "NO_MIXED_PRECISION": "--amp --amp-dtype bfloat16",
    "OPTIMIZER_UNFUSED": "--opt adamw --opt-kwargs {impl}=True",
    "NO_COMPILE": "--torchcompile",
    "H2D_PAGEABLE": "--pin-mem",
    "DATA_WAIT": "--workers {workers}",
    "EVAL_OVERHEAD": "--val-interval 5",
}
# Constructor calls the templates write as `Name(..., key=value, ...)`, per framework.
CALL = re.compile(r"\b(TrainingArguments|L\.Trainer|Accelerator|DataLoaderConfiguration)\(([^()]*)\)")


def _timm_templates() -> dict[str, str]:
    return {fid: text for (fid, fw), text in ff.FIXES.items() if fw == "timm"}


def _keywords(framework: str) -> dict[str, set[str]]:
    """Keyword names each constructor is called with in ``framework``'s templates."""
    out: dict[str, set[str]] = {}
    for (_fid, fw), text in ff.FIXES.items():
        if fw != framework:
            continue
        for name, args in CALL.findall(text):
            out.setdefault(name, set()).update(re.findall(r"(\w+)=", args))
    return out


def test_every_timm_flag_is_one_train_py_defines():
    used = set()
    for text in _timm_templates().values():
        used |= set(re.findall(r"(?<!\w)--[a-z][a-z-]*", text))
    assert used and used <= TIMM_FLAGS, used - TIMM_FLAGS


@pytest.mark.parametrize("finding_id,flags", sorted(TIMM_EXACT.items()))
def test_timm_flag_strings(finding_id, flags):
    assert flags in _timm_templates()[finding_id]


def test_templates_call_each_framework_with_keywords():
    assert _keywords("hf_trainer")["TrainingArguments"] >= {"bf16", "optim", "torch_compile"}
    assert _keywords("lightning")["L.Trainer"] >= {"precision", "accumulate_grad_batches"}
    assert _keywords("accelerate")["Accelerator"] >= {"mixed_precision", "dynamo_backend"}


def test_training_arguments_fields_of_the_installed_transformers():
    transformers = pytest.importorskip("transformers", reason="the frameworks extra is not installed")
    from transformers.training_args import OptimizerNames

    fields = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    used = _keywords("hf_trainer")["TrainingArguments"]
    assert used <= fields, used - fields
    assert "adamw_torch_fused" in {o.value for o in OptimizerNames}
    # The length-grouping switch the fix names is the one this version has.
    switch = "train_sampling_strategy" if "train_sampling_strategy" in fields else "group_by_length"
    assert switch in fields
    assert hasattr(transformers, "DataCollatorWithPadding") and hasattr(transformers, "DataCollatorWithFlattening")


def test_lightning_trainer_arguments_and_precision_value():
    pytest.importorskip("lightning", reason="the frameworks extra is not installed")
    import lightning as L
    from lightning.fabric.connector import _PRECISION_INPUT

    params = set(inspect.signature(L.Trainer.__init__).parameters)
    used = _keywords("lightning")["L.Trainer"]
    assert used <= params, used - params
    accepted = {v for arg in typing.get_args(_PRECISION_INPUT) for v in typing.get_args(arg)}
    assert "bf16-mixed" in accepted


def test_accelerator_arguments_of_the_installed_accelerate():
    pytest.importorskip("accelerate", reason="the frameworks extra is not installed")
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration

    params = set(inspect.signature(Accelerator.__init__).parameters)
    used = _keywords("accelerate")
    assert used["Accelerator"] <= params, used["Accelerator"] - params
    config_fields = {f.name for f in dataclasses.fields(DataLoaderConfiguration)}
    assert used["DataLoaderConfiguration"] <= config_fields


def test_timm_batch_fix_names_the_grown_batch():
    from stave.diagnose.finding import Finding
    from stave.measure.config import ConfigSnapshot

    finding = Finding(id="SMALL_BATCH", severity="warning", title="t", est_speedup=1.5,
                      evidence={"samples_per_step": 32.0, "batch_growth": 4}, fix="batch_size = 128")
    text = ff.framework_fix(finding, ConfigSnapshot(framework="timm"))
    assert "--batch-size 128" in text
    assert "--grad-accum-steps 1" in text


def test_batch_fix_under_accumulation_grows_the_micro_batch_and_keeps_the_step():
    from stave.diagnose.finding import Finding
    from stave.measure.config import ConfigSnapshot

    # 8 micro-batches of 4 per optimizer step, grown 4x: 2 micro-batches of 16, the same 32 samples.
    finding = Finding(id="SMALL_BATCH", severity="warning", title="t", est_speedup=2.0,
                      evidence={"samples_per_step": 32.0, "micro_batches_per_step": 8, "batch_growth": 4},
                      fix="accumulation_steps = 2")
    lightning = ff.framework_fix(finding, ConfigSnapshot(framework="lightning"))
    assert "batch_size=16" in lightning and "accumulate_grad_batches=2" in lightning and "same lr" in lightning
    hf = ff.framework_fix(finding, ConfigSnapshot(framework="hf_trainer"))
    assert "per_device_train_batch_size=16" in hf and "gradient_accumulation_steps=2" in hf


def test_eval_fix_names_the_rules_interval():
    from stave.diagnose.finding import Finding
    from stave.measure.config import ConfigSnapshot

    finding = Finding(id="EVAL_OVERHEAD", severity="warning", title="t", est_speedup=2.0,
                      evidence={"eval_interval_steps": 5.0, "eval_interval_steps_after": 200}, fix="every 200")
    assert "val_check_interval=200" in ff.framework_fix(finding, ConfigSnapshot(framework="lightning"))
    assert "eval_steps=200" in ff.framework_fix(finding, ConfigSnapshot(framework="hf_trainer"))
