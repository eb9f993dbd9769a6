"""The ladder's final configuration as code to paste into the training script (``stave tune``).

The input-pipeline lines come first (DataLoader arguments, or the kept custom loader), then the
training step from :func:`stave.train.snippet`, which the doctor's fixes use too.
"""

from __future__ import annotations

from stave.bench.settings import TORCH_LOADER, RunConfig
from stave.bench.spec import JobSpec
from stave.train.snippet import snippet


def loader_lines(spec: JobSpec, config: RunConfig) -> list[str]:
    """How to build the kept input pipeline."""
    if config.loader != TORCH_LOADER:
        custom = next((c for c in spec.loaders if c.name == config.loader), None)
        code = custom.code.strip() if custom is not None and custom.code else f"# use the job's {config.loader} loader"
        return code.splitlines()
    lines = []
    if config.uint8:
        lines.append("# dataset: the same samples as uint8 CHW tensors (PILToTensor instead of ToTensor + Normalize)")
    args = ["dataset", f"batch_size={config.batch_size}", "shuffle=True", f"num_workers={config.num_workers}"]
    if config.num_workers > 0:
        args.append("persistent_workers=True")
    if config.pin_memory:
        args.append("pin_memory=True")
    lines.append(f"loader = torch.utils.data.DataLoader({', '.join(args)})")
    return lines


def tune_code(spec: JobSpec, baseline: RunConfig, final: RunConfig, image_inputs: bool) -> str:
    """Paste-able code for ``final``, with comments on what changed from ``baseline``."""
    header = [f"# stave bench ladder: the configuration kept for {spec.name} on this machine"]
    changes = final.changes_from(baseline)
    if not changes:
        header.append("# no rung helped measurably: the job's own settings are kept")
    else:
        header.append("# changed: " + ", ".join(f"{k}={v}" for k, v in changes.items()))
    if final.batch_size != baseline.batch_size:
        header.append(
            f"# batch {baseline.batch_size} -> {final.batch_size}: "
            "scale the learning rate with it and re-check convergence"
        )
    probe = spec.optimizer(spec.model())
    normalize = spec.normalize if (final.uint8 and final.loader == TORCH_LOADER) else None
    step = snippet(
        final.train,
        optimizer=probe,
        normalize=normalize,
        non_blocking=final.pin_memory,
        image_inputs=image_inputs,
    )
    return "\n".join(header + loader_lines(spec, final)) + "\n" + step
