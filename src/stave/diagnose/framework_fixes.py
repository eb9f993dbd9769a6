"""Fixes in the words of the framework that runs the loop (Lightning, HF Trainer, accelerate, timm).

Rules write their fix as plain PyTorch code. When the record says a framework drives the loop
(``ConfigSnapshot.framework``, read by ``capture/frameworks.py``), the fix is the switch that
framework offers: :data:`FIXES` maps ``(finding ID, framework)`` to that text, and
:func:`apply_framework_fixes` swaps it in once, after every rule has run. Templates may name
``{workers}`` (the rule's suggested loader workers), ``{impl}`` (OPTIMIZER_UNFUSED's fastest
implementation, ``fused`` or ``foreach``), ``{larger_batch}``/``{accum_after}``/``{lr_note}`` (SMALL_BATCH's grown (micro-)batch, accumulation
steps left and learning-rate note), ``{eval_every}`` (EVAL_OVERHEAD's interval in steps)
and ``{group_by_length}`` (the ``TrainingArguments`` switch of the installed transformers).

Every switch was checked against its source: timm's ``train.py`` argparse flags at
huggingface/pytorch-image-models commit aa4b5850c1543fa488abf260f18390eda46cf85d (``--amp``,
``--amp-dtype bfloat16``, ``-j/--workers``, ``--pin-mem``, ``--torchcompile``, ``--opt``,
``--opt-kwargs key=value``, ``-b/--batch-size`` (the lr follows it from ``--lr-base`` unless ``--lr`` is set), ``--grad-accum-steps``, ``--val-interval``), and
the keyword arguments of Lightning's ``Trainer``, transformers' ``TrainingArguments`` and
accelerate's ``Accelerator`` against the installed packages (tests/unit/diagnose/
test_framework_switches.py pins both).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from stave.diagnose.finding import Finding
from stave.measure.config import ConfigSnapshot

# Loader workers a template proposes when the rule did not size them.
DEFAULT_WORKERS = 4

FIXES: dict[tuple[str, str], str] = {
    # --- mixed precision ---
    ("NO_MIXED_PRECISION", "lightning"): 'trainer = L.Trainer(..., precision="bf16-mixed")',
    ("NO_MIXED_PRECISION", "hf_trainer"): "args = TrainingArguments(..., bf16=True)",
    ("NO_MIXED_PRECISION", "accelerate"): 'accelerator = Accelerator(mixed_precision="bf16")  # or: accelerate launch --mixed_precision bf16',
    ("NO_MIXED_PRECISION", "timm"): "python train.py ... --amp --amp-dtype bfloat16",
    # --- loader workers ---
    ("DATA_WAIT", "lightning"): "train_loader = DataLoader(dataset, ..., num_workers={workers}, persistent_workers=True)  # returned by train_dataloader()",
    ("DATA_WAIT", "hf_trainer"): "args = TrainingArguments(..., dataloader_num_workers={workers}, dataloader_persistent_workers=True)",
    ("DATA_WAIT", "accelerate"): "loader = DataLoader(dataset, ..., num_workers={workers}, persistent_workers=True)\nmodel, optimizer, loader = accelerator.prepare(model, optimizer, loader)",
    ("DATA_WAIT", "timm"): "python train.py ... --workers {workers}",
    ("DATA_CPU_BOUND", "lightning"): "train_loader = DataLoader(dataset, ..., num_workers={workers}, persistent_workers=True)  # returned by train_dataloader()",
    ("DATA_CPU_BOUND", "hf_trainer"): "args = TrainingArguments(..., dataloader_num_workers={workers}, dataloader_persistent_workers=True)",
    ("DATA_CPU_BOUND", "accelerate"): "loader = DataLoader(dataset, ..., num_workers={workers}, persistent_workers=True)\nmodel, optimizer, loader = accelerator.prepare(model, optimizer, loader)",
    ("DATA_CPU_BOUND", "timm"): "python train.py ... --workers {workers}",
    ("DATA_WORKER_STARTUP", "hf_trainer"): "args = TrainingArguments(..., dataloader_persistent_workers=True)",
    ("DATA_WORKER_STARTUP", "lightning"): "train_loader = DataLoader(dataset, ..., persistent_workers=True)  # returned by train_dataloader()",
    # --- pinned memory ---
    ("H2D_PAGEABLE", "lightning"): "train_loader = DataLoader(dataset, ..., pin_memory=True)  # Lightning then copies non_blocking",
    ("H2D_PAGEABLE", "hf_trainer"): "args = TrainingArguments(..., dataloader_pin_memory=True)",
    ("H2D_PAGEABLE", "accelerate"): "loader = DataLoader(dataset, ..., pin_memory=True)\naccelerator = Accelerator(dataloader_config=DataLoaderConfiguration(non_blocking=True))",
    ("H2D_PAGEABLE", "timm"): "python train.py ... --pin-mem",
    # --- compile ---
    ("NO_COMPILE", "lightning"): "model = torch.compile(model)  # the LightningModule, before trainer.fit(model)",
    ("NO_COMPILE", "hf_trainer"): "args = TrainingArguments(..., torch_compile=True)",
    ("NO_COMPILE", "accelerate"): 'accelerator = Accelerator(dynamo_backend="inductor")',
    ("NO_COMPILE", "timm"): "python train.py ... --torchcompile",
    # --- fused optimizer ---
    ("OPTIMIZER_UNFUSED", "lightning"): "def configure_optimizers(self):\n    return torch.optim.AdamW(self.parameters(), lr=self.lr, {impl}=True)",
    ("OPTIMIZER_UNFUSED", "hf_trainer"): 'args = TrainingArguments(..., optim="adamw_torch_fused")',
    ("OPTIMIZER_UNFUSED", "accelerate"): "optimizer = torch.optim.AdamW(model.parameters(), lr=lr, {impl}=True)  # before accelerator.prepare",
    ("OPTIMIZER_UNFUSED", "timm"): "python train.py ... --opt adamw --opt-kwargs {impl}=True",
    # --- larger effective batch ---
    ("SMALL_BATCH", "lightning"): (
        "train_loader = DataLoader(dataset, batch_size={larger_batch}, ...)  # returned by train_dataloader()\n"
        "trainer = L.Trainer(..., accumulate_grad_batches={accum_after})  {lr_note}"
    ),
    ("SMALL_BATCH", "hf_trainer"): "args = TrainingArguments(..., per_device_train_batch_size={larger_batch}, gradient_accumulation_steps={accum_after})  {lr_note}",
    ("SMALL_BATCH", "accelerate"): (
        "loader = DataLoader(dataset, batch_size={larger_batch}, ...)  # before accelerator.prepare\n"
        "accelerator = Accelerator(gradient_accumulation_steps={accum_after})  {lr_note}"
    ),
    ("SMALL_BATCH", "timm"): "python train.py ... --batch-size {larger_batch} --grad-accum-steps {accum_after}  # without --lr, timm scales it from --lr-base to the new batch",
    # --- padding ---
    ("PADDING_WASTE", "hf_trainer"): (
        "args = TrainingArguments(..., {group_by_length})  # batches of similar length\n"
        "trainer = Trainer(model, args, data_collator=DataCollatorWithPadding(tokenizer), ...)  # pad per batch\n"
        '# and tokenize without padding="max_length"; with flash attention, DataCollatorWithFlattening() packs without padding'
    ),
    ("PADDING_WASTE", "lightning"): (
        "def train_dataloader(self):  # pad per batch, not to a fixed length\n"
        "    return DataLoader(self.train_ds, batch_size=bs, collate_fn=DataCollatorWithPadding(tokenizer))"
    ),
    ("PADDING_WASTE", "accelerate"): (
        "loader = DataLoader(ds, batch_size=bs, collate_fn=DataCollatorWithPadding(tokenizer))  # pad per batch\n"
        "loader = accelerator.prepare(loader)"
    ),
    # --- attention ---
    ("ATTENTION_EAGER", "hf_trainer"): 'model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="sdpa")  # before Trainer(model, ...)',
    # --- evaluation ---
    ("EVAL_OVERHEAD", "lightning"): "trainer = L.Trainer(..., val_check_interval={eval_every})  # or limit_val_batches=0.25: a subset",
    ("EVAL_OVERHEAD", "timm"): "python train.py ... --val-interval 5  # validate every 5 epochs, not after each",
    ("EVAL_OVERHEAD", "hf_trainer"): 'args = TrainingArguments(..., eval_strategy="steps", eval_steps={eval_every})  # fewer evaluations',
}


class _Fields(dict):
    """Template fields; a name the template uses but the run did not give renders as ``...``."""

    def __missing__(self, key: str) -> str:
        return "..."


def group_by_length_switch(config: ConfigSnapshot) -> str:
    """The ``TrainingArguments`` argument that groups by length in the installed transformers."""
    if config.framework_options.get("group_by_length") == "train_sampling_strategy":
        return 'train_sampling_strategy="group_by_length"'
    return "group_by_length=True"


def framework_fix(finding: Finding, config: ConfigSnapshot) -> str | None:
    """The fix text of ``finding`` in ``config.framework``'s words, or None when there is none."""
    if not config.framework:
        return None
    template = FIXES.get((finding.id, config.framework))
    if template is None:
        return None
    workers = finding.evidence.get("suggested_workers") or DEFAULT_WORKERS
    fields = _Fields(workers=workers, group_by_length=group_by_length_switch(config),
                     impl=finding.evidence.get("best_implementation") or "fused")
    batch, growth = finding.evidence.get("samples_per_step"), finding.evidence.get("batch_growth")
    if isinstance(batch, (int, float)) and isinstance(growth, int) and batch > 0:
        # Under gradient accumulation SMALL_BATCH grows the micro-batch and keeps the optimizer
        # step's samples (and so the learning rate); otherwise the effective batch grows.
        accum = max(1, int(finding.evidence.get("micro_batches_per_step") or 1))
        fields["larger_batch"] = max(1, round(batch) // accum) * growth
        fields["accum_after"] = max(1, accum // growth)
        fields["lr_note"] = ("# same samples per optimizer step, same lr" if accum >= 2
                             else f"# lr x{growth} (linear scaling rule), warmed up")
    every = finding.evidence.get("eval_interval_steps_after")
    if isinstance(every, (int, float)) and every > 0:
        fields["eval_every"] = int(every)
    return template.format_map(fields)


def apply_framework_fixes(findings: Sequence[Finding], config: ConfigSnapshot) -> list[Finding]:
    """``findings`` with each fix replaced by the framework's switch where :data:`FIXES` has one."""
    out = []
    for finding in findings:
        text = framework_fix(finding, config)
        out.append(finding if text is None else dataclasses.replace(finding, fix=text))
    return out
