"""A Lightning script and an accelerate loop: recognized, their batches counted, validation kept
out of the step, fixes in their words. Skipped without the packages (optional: stave[frameworks])."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import stave
from stave.diagnose.framework_fixes import apply_framework_fixes
from stave.diagnose.finding import Finding


class DictRows(Dataset):
    """Samples as dicts: the batch the model sees is a dict of tensors."""

    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 16, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> dict:
        return {"features": self.x[i], "label": self.y[i]}


def mixed_precision_finding() -> Finding:
    return Finding("NO_MIXED_PRECISION", "warning", 1.2, "t", {}, "with torch.autocast(...): ...")


@pytest.mark.slow
def test_lightning_fit_with_validation():
    L = pytest.importorskip("lightning", reason="lightning is not installed (optional: stave[frameworks])")

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

        def training_step(self, batch, _i):
            return nn.functional.cross_entropy(self.net(batch["features"]), batch["label"])

        def validation_step(self, batch, _i):
            self.net(batch["features"])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = L.Trainer(max_steps=12, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, val_check_interval=4,
                        limit_val_batches=3, num_sanity_val_steps=0)
    with stave.watch(warmup=2, probes=False) as run:
        trainer.fit(Module(), DataLoader(DictRows(256), batch_size=8), DataLoader(DictRows(64), batch_size=8))
    rec = run.record
    assert rec.config.framework == "lightning"
    assert len(rec.steps) == 12
    with_eval = [s for s in rec.steps if s.eval_ns > 0]
    assert with_eval and all(s.eval_forwards == 3 for s in with_eval)
    assert all(s.samples == 8 for s in rec.steps[1:])  # validation batches are not training samples
    [fixed] = apply_framework_fixes([mixed_precision_finding()], rec.config)
    assert 'precision="bf16-mixed"' in fixed.fix


def test_accelerate_loop():
    accelerate = pytest.importorskip("accelerate", reason="accelerate is not installed (optional: stave[frameworks])")
    acc = accelerate.Accelerator(cpu=True)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(DictRows(128), batch_size=16)
    model, opt, loader = acc.prepare(model, opt, loader)
    with stave.watch(warmup=1, probes=False) as run:
        for batch in loader:
            loss = nn.functional.cross_entropy(model(batch["features"]), batch["label"])
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
    rec = run.record
    assert rec.config.framework == "accelerate"
    assert [s.samples for s in rec.steps[1:]] == [16] * (len(rec.steps) - 1)
    [fixed] = apply_framework_fixes([mixed_precision_finding()], rec.config)
    assert 'mixed_precision="bf16"' in fixed.fix
    unfused = dataclasses.replace(mixed_precision_finding(), id="OPTIMIZER_UNFUSED")
    assert "before accelerator.prepare" in apply_framework_fixes([unfused], rec.config)[0].fix
