"""``stave bench data``: stave pack + ImageLoader against tuned torchvision pipelines, same JPEGs, same cores.

Steps: generate an ImageNet-like JPEG folder (:mod:`stave.data.synth`, cached in ``--workdir``);
pack it (as is, with ``--max-side 256``, and a ``--raw`` 32x32 set); write the same JPEG bytes to
LMDB and HDF5; search torchvision ImageFolder + PIL over DataLoader configurations (every result
reported); then measure all contenders interleaved (A B A B ...) for ``--rounds`` rounds and report
the median images/s with its spread, CPU-seconds per image and peak RSS, and the goals of issue 4 as
ratios taken within each round. Run it as ``stave bench data``.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console

from stave.data import bench_pipelines as bp
from stave.data.bench_args import add_arguments
from stave.device import cpu_model_name, usable_cores
from stave.errors import UsageError
from stave.files import atomic_write_json, check_writable

__all__ = ["add_arguments", "run"]

log = logging.getLogger(__name__)

SCHEMA = "stave.bench.data/1"
# Issue 4's goals, as ratios measured within one round.
GOAL_VS_BASELINE = 2.0
GOAL_VS_CEILING = 0.75
GOAL_MAX_SIDE_VS_BASELINE = 4.0
MAX_SIDE_PX = 256
RAW_SIDE_PX = 32


@dataclass
class Contender:
    """A pipeline and its measured windows."""

    key: str
    pipeline: bp.Pipeline
    windows: list[bp.Window] = field(default_factory=list)

    def rate(self) -> float:
        return statistics.median(w.images_per_s for w in self.windows)

    def summary(self) -> dict[str, Any]:
        """Median images/s with its spread, CPU-seconds per image and peak RSS over the windows."""
        rates = [w.images_per_s for w in self.windows]
        return {
            "key": self.key,
            "pipeline": self.pipeline.name,
            "config": self.pipeline.config,
            "images_per_s": round(statistics.median(rates), 1),
            "images_per_s_min": round(min(rates), 1),
            "images_per_s_max": round(max(rates), 1),
            "cpu_s_per_image": round(statistics.median(w.cpu_s / w.images for w in self.windows), 6),
            "peak_rss_bytes": max(w.peak_rss_bytes for w in self.windows),
            "windows": len(self.windows),
            **self._decode_stats(),
        }

    def _decode_stats(self) -> dict[str, Any]:
        extra = self.pipeline.extra
        if not extra.get("samples"):
            return {}
        return {
            "threads": extra["workers"],
            "reduced_scale_share": round(extra["reduced"] / extra["samples"], 4),
            "rows_decoded_share": round(extra["rows_decoded"] / extra["rows_total"], 4) if extra["rows_total"] else None,
        }


def _prepare(args: argparse.Namespace, err: Console) -> dict[str, Any]:
    from stave.data.synth import make_image_folder
    from stave.data.writer import pack, packed_with

    long_side = 250 if args.quick else 500
    tag = f"n{args.images}-c{args.classes}-s{args.seed}-l{long_side}"
    root = args.workdir / tag
    folder = root / "jpeg"
    if not (root / "jpeg.done").exists():
        err.print(f"generating {args.images} JPEGs in {folder} ...", markup=False)
        make_image_folder(folder, args.images, args.classes, seed=args.seed, long_side=long_side, overwrite=True)
        (root / "jpeg.done").write_text("ok\n")
    files = sorted(folder.rglob("*.jpg"))
    labels = np.array([int(f.parent.name.split("_")[1]) for f in files])
    packs = {}
    for name, opts in (("full", {}), ("max256", {"max_side": MAX_SIDE_PX})):
        dst = root / f"packed-{name}"
        if not packed_with(dst, {"restart_markers": True, **opts}):
            err.print(f"stave pack {folder} {dst} {'--max-side 256' if opts else ''}", soft_wrap=True, markup=False)
            pack(folder, dst, overwrite=True, **opts)
        packs[name] = dst
    small = root / "jpeg32"
    if not (root / "jpeg32.done").exists():
        from PIL import Image

        for f in files:
            out = small / f.parent.name / f.name
            out.parent.mkdir(parents=True, exist_ok=True)
            with Image.open(f) as im:
                side = min(im.size)
                box = ((im.size[0] - side) // 2, (im.size[1] - side) // 2)
                im.crop((*box, box[0] + side, box[1] + side)).resize((RAW_SIDE_PX, RAW_SIDE_PX), Image.Resampling.LANCZOS).save(out, quality=90)
        (root / "jpeg32.done").write_text("ok\n")
    raw = root / "packed-raw32"
    if not (raw / "manifest.json").exists():
        err.print(f"stave pack {small} {raw} --raw", soft_wrap=True, markup=False)
        pack(small, raw, raw=True, overwrite=True)
    stores = bp.write_stores(files, labels, root)
    mean_bytes = float(np.mean([f.stat().st_size for f in files]))
    return {"folder": folder, "small": small, "files": files, "labels": labels, "packs": packs, "raw": raw, "stores": stores, "mean_file_bytes": mean_bytes}


def _stave_pipeline(name: str, path: Path, args: argparse.Namespace, train: bool = True, size: int | None = None) -> bp.Pipeline:
    from stave.data.loader import ImageLoader

    totals = {"samples": 0, "reduced": 0, "rows_decoded": 0, "rows_total": 0, "workers": 0}

    def opener() -> Any:
        loader = ImageLoader(path, args.batch_size, train=train, size=size or args.size, workers="auto", device="cpu", seed=args.seed)
        return bp._EpochLoop(loader)

    def closer(handle: Any) -> None:
        stats = handle.loader.stats
        for key in ("samples", "reduced", "rows_decoded", "rows_total"):
            totals[key] += getattr(stats, key)
        totals["workers"] = handle.loader.workers
        handle.close()

    pipeline = bp.Pipeline(name, "threads=auto", opener, closer)
    pipeline.extra = totals
    return pipeline


def _search(data: dict[str, Any], args: argparse.Namespace, err: Console, timed: int) -> list[dict[str, Any]]:
    from torchvision.datasets import ImageFolder

    dataset = ImageFolder(str(data["folder"]), transform=bp.torchvision_transform(args.size, train=True))
    configs = bp.search_space(args.max_workers) if not args.quick else [bp.LoaderConfig(0), bp.LoaderConfig(2, True, 2)]
    results = []
    for cfg in configs:
        window = bp.measure_window(bp.dataloader_pipeline("torchvision", dataset, cfg, args.batch_size), 1, timed)
        err.print(f"  search {cfg.label}: {window.images_per_s:.0f} images/s")
        results.append({"config": cfg, "images_per_s": window.images_per_s, "cpu_s_per_image": window.cpu_s / window.images, "peak_rss_bytes": window.peak_rss_bytes})
    return results


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the data benchmark (progress on stderr); returns the ``stave.bench.data/1`` report, also
    written to ``--json`` (the table: :func:`stave.report.bench_data.render_data_bench`)."""
    if args.quick:
        args.images, args.classes, args.batch_size, args.size, args.rounds = min(args.images, 128), 4, 32, 96, 1
    if args.images < args.batch_size * 2:
        raise UsageError(f"--images must be at least two batches ({2 * args.batch_size})")
    check_writable(args.json, "--json")
    # The search deliberately tries more workers than cores; torch's warning about it is expected.
    warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
    err = Console(stderr=True)
    data = _prepare(args, err)
    timed = len(data["files"]) // args.batch_size  # one epoch per window: one epoch boundary inside
    from torchvision.datasets import ImageFolder

    err.print("searching torchvision ImageFolder + PIL configurations ...")
    search = _search(data, args, err, timed)
    best = max(search, key=lambda r: r["images_per_s"])["config"]
    err.print(f"best baseline: {best.label}")
    size = args.size

    def tv(train: bool, uint8: bool = False, root: Path | None = None, s: int = size) -> ImageFolder:
        return ImageFolder(str(root or data["folder"]), transform=bp.torchvision_transform(s, train, uint8))

    contenders = [
        Contender("baseline", bp.dataloader_pipeline("(1) torchvision ImageFolder+PIL, ToTensor+Normalize", tv(True), best, args.batch_size)),
        Contender("pil_to_tensor", bp.dataloader_pipeline("(2) same with PILToTensor (uint8), normalize in main", tv(True, True), best, args.batch_size, uint8=True)),
    ]
    for kind, path in data["stores"].items():
        store = bp._EncodedStore(kind, path, data["labels"], bp.torchvision_transform(size, True))
        contenders.append(Contender(kind, bp.dataloader_pipeline(f"(3) JPEG bytes in {kind.upper()}, PIL decode", store, best, args.batch_size)))
    contenders += [
        Contender("stave", _stave_pipeline("(4) stave pack + ImageLoader", data["packs"]["full"], args)),
        Contender("stave_processes", bp.dataloader_pipeline("(5) stave crop-aware decode in DataLoader processes", bp._CropDecodeDataset(data["packs"]["full"], size, args.seed), best, args.batch_size, uint8=True)),
        Contender("stave_max256", _stave_pipeline("(6) stave pack --max-side 256 + ImageLoader", data["packs"]["max256"], args)),
        Contender("baseline_eval", bp.dataloader_pipeline("(7) torchvision eval: Resize+CenterCrop", tv(False), best, args.batch_size)),
        Contender("stave_eval", _stave_pipeline("(8) stave ImageLoader eval", data["packs"]["full"], args, train=False)),
        Contender("baseline_32", bp.dataloader_pipeline("(9) torchvision 32x32 JPEG ImageFolder", tv(True, root=data["small"], s=RAW_SIDE_PX), best, args.batch_size)),
        Contender("stave_raw32", _stave_pipeline("(10) stave pack --raw 32x32 + ImageLoader", data["raw"], args, size=RAW_SIDE_PX)),
    ]
    from stave.data.decode import available_backends, get_backend

    ceilings = [Contender(f"ceiling_{b}", bp.decode_ceiling_pipeline(data["files"], b, args.batch_size)) for b in available_backends()]
    ceilings += [
        Contender(f"ceiling_{b}_buffer", bp.decode_ceiling_pipeline(data["files"], b, args.batch_size, reuse_output=True))
        for b in available_backends()
        if b != "pillow" and getattr(get_backend(b), "decodes_in_place", False)
    ]
    from stave.data.native import native_available

    if native_available():
        # stave's own libjpeg-turbo call (the system library) is a binding too: when its full decode is
        # faster, the ceiling rises with it, so the region decode is never compared with a slower library.
        ceilings.append(Contender("ceiling_native_buffer", bp.decode_ceiling_pipeline(data["files"], "native", args.batch_size, reuse_output=True)))
    everyone = contenders + ceilings
    for round_number in range(args.rounds):
        for contender in everyone:
            err.print(f"round {round_number + 1}/{args.rounds}: {contender.pipeline.name}")
            contender.windows.append(bp.measure_window(contender.pipeline, 1, timed))
    report = _report(args, data, search, best, contenders, ceilings)
    if args.json:
        atomic_write_json(args.json, report)
    return report


def _ratio(a: Contender, b: Contender, scale: float = 1.0) -> dict[str, float]:
    per_round = [wa.images_per_s / (wb.images_per_s * scale) for wa, wb in zip(a.windows, b.windows)]
    return {"median": round(statistics.median(per_round), 3), "min": round(min(per_round), 3), "max": round(max(per_round), 3)}


def _report(args: argparse.Namespace, data: dict[str, Any], search: list[dict[str, Any]], best: bp.LoaderConfig, contenders: list[Contender], ceilings: list[Contender]) -> dict[str, Any]:
    by_key = {c.key: c for c in contenders}
    cores = usable_cores()
    fastest = max(ceilings, key=lambda c: c.rate())
    # The ceiling is per-core single-thread rate times the cores the pipelines may use; the
    # per-round ratio divides by that round's ceiling window.
    goals = {
        "stave_vs_baseline": {**_ratio(by_key["stave"], by_key["baseline"]), "goal": GOAL_VS_BASELINE},
        "stave_vs_ceiling": {**_ratio(by_key["stave"], fastest, cores), "goal": GOAL_VS_CEILING},
        "stave_max256_vs_baseline": {**_ratio(by_key["stave_max256"], by_key["baseline"]), "goal": GOAL_MAX_SIDE_VS_BASELINE},
        "stave_threads_vs_processes": _ratio(by_key["stave"], by_key["stave_processes"]),
        "stave_eval_vs_baseline_eval": _ratio(by_key["stave_eval"], by_key["baseline_eval"]),
        "stave_raw32_vs_baseline_32": _ratio(by_key["stave_raw32"], by_key["baseline_32"]),
    }
    # Load-independent view of the same goal: decode CPU-seconds per image over stave's (what the
    # wall-clock ratio becomes when both get whole cores; on a shared machine they do not).
    per_round = [
        (wc.cpu_s / wc.images) / (ws.cpu_s / ws.images)
        for wc, ws in zip(fastest.windows, by_key["stave"].windows)
        if ws.cpu_s > 0 and wc.cpu_s > 0
    ]
    if per_round:
        goals["stave_vs_ceiling_cpu_seconds"] = {
            "median": round(statistics.median(per_round), 3), "min": round(min(per_round), 3), "max": round(max(per_round), 3)
        }
    for goal in goals.values():
        if "goal" in goal:
            goal["met"] = goal["median"] >= goal["goal"]
    return {
        "schema": SCHEMA,
        "machine": {"cpu": cpu_model_name(), "cores": cores, "torch_threads": torch.get_num_threads()},
        "workload": {"images": len(data["files"]), "mean_file_bytes": round(data["mean_file_bytes"]), "batch_size": args.batch_size, "size": args.size, "rounds": args.rounds, "quick": bool(args.quick)},
        "decode_ceiling": {"binding": fastest.key.removeprefix("ceiling_"), "images_per_s_per_core": round(fastest.rate(), 1), "cores": cores, "images_per_s": round(fastest.rate() * cores, 1), "bindings": [c.summary() for c in ceilings]},
        "baseline_search": [{"config": r["config"].label, "images_per_s": round(r["images_per_s"], 1), "cpu_s_per_image": round(r["cpu_s_per_image"], 6), "peak_rss_bytes": r["peak_rss_bytes"]} for r in search],
        "baseline_best": best.label,
        "results": [c.summary() for c in contenders],
        "goals": goals,
    }
