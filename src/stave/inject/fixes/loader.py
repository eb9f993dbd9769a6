"""DataLoader settings: worker processes, persistent workers, prefetch depth, pinned memory, batched fetch.

Each unit rewrites the arguments of the DataLoaders the script builds (:mod:`stave.inject.loader_args`).
None of them changes which samples a step sees: the sampler, its generator and the batch are the
user's. Workers do run the dataset's random transforms from their own seeds, so random augmentation
draws differ from a run in the main process (the loss check then compares like with like only in
distribution).
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler, TensorDataset

from stave.inject.loader_args import (ORDER_FETCH, ORDER_NUM_WORKERS, ORDER_PIN, ORDER_WORKER_SETTINGS,
                                      dataset_kind, override_loader_args)
from stave.inject.registry import register
from stave.inject.machine import Machine
from stave.inject.unit import Applied, FixUnit, Param

NO_LOADER = "the script built no DataLoader this fix could change"


def _apply_num_workers(applied: Applied, params: dict[str, Any], machine: Machine) -> None:
    target = params["num_workers"]

    def override(args: dict[str, Any]) -> None:
        if dataset_kind(args) == "iterable" and target > 0:
            # Each worker would replay the whole stream unless the dataset shards itself by
            # get_worker_info(), which stave cannot know: the data seen would change.
            applied.note("left an IterableDataset's loader alone: each worker would replay its whole stream")
            return
        if args["num_workers"] == target:
            applied.note(f"a loader already had num_workers={target}")
            return
        args["num_workers"] = target
        if target == 0:
            # torch refuses these without workers.
            args["persistent_workers"] = False
            args["prefetch_factor"] = None
        applied.hits += 1

    override_loader_args(applied, ORDER_NUM_WORKERS, override)


NUM_WORKERS = register(FixUnit(
    id="num_workers",
    title="DataLoader workers",
    changes="DataLoader(num_workers=k): load batches in k worker processes instead of the main one",
    params=(Param("num_workers", "int", "worker processes per DataLoader", required=True, minimum=0),),
    apply=_apply_num_workers,
    undo_doc="DataLoader.__init__ restored; loaders built while it was applied keep their workers",
    no_hit=NO_LOADER,
    model_input="workers",
))


def _needs_workers(applied: Applied, args: dict[str, Any], name: str) -> bool:
    if args["num_workers"] > 0:
        return True
    applied.note(f"a loader without workers (num_workers=0) kept its {name}")
    return False


def _apply_persistent(applied: Applied, params: dict[str, Any], machine: Machine) -> None:
    def override(args: dict[str, Any]) -> None:
        if not _needs_workers(applied, args, "persistent_workers") or args["persistent_workers"]:
            return
        args["persistent_workers"] = True
        applied.hits += 1

    override_loader_args(applied, ORDER_WORKER_SETTINGS, override)


PERSISTENT_WORKERS = register(FixUnit(
    id="persistent_workers",
    title="persistent DataLoader workers",
    changes="DataLoader(persistent_workers=True): keep the workers across epochs instead of restarting them",
    params=(),
    apply=_apply_persistent,
    undo_doc="DataLoader.__init__ restored",
    no_hit="no loader with workers that restarts them each epoch",
    model_input="wait_exposed_s",
))


def _apply_prefetch(applied: Applied, params: dict[str, Any], machine: Machine) -> None:
    factor = params["prefetch_factor"]

    def override(args: dict[str, Any]) -> None:
        if not _needs_workers(applied, args, "prefetch_factor") or args["prefetch_factor"] == factor:
            return
        args["prefetch_factor"] = factor
        applied.hits += 1

    override_loader_args(applied, ORDER_WORKER_SETTINGS, override)


PREFETCH_FACTOR = register(FixUnit(
    id="prefetch_factor",
    title="DataLoader prefetch depth",
    changes="DataLoader(prefetch_factor=n): each worker keeps n batches in flight",
    params=(Param("prefetch_factor", "int", "batches in flight per worker", required=True, minimum=1),),
    apply=_apply_prefetch,
    undo_doc="DataLoader.__init__ restored",
    no_hit="no loader with workers",
    model_input="wait_exposed_s",
))


def _apply_pin(applied: Applied, params: dict[str, Any], machine: Machine) -> None:
    def override(args: dict[str, Any]) -> None:
        if args["pin_memory"]:
            applied.note("a loader already pinned its batches")
            return
        args["pin_memory"] = True
        applied.hits += 1

    override_loader_args(applied, ORDER_PIN, override)


PIN_MEMORY = register(FixUnit(
    id="pin_memory",
    title="pinned host batches",
    changes="DataLoader(pin_memory=True): batches in page-locked memory, copied to the GPU by DMA "
            "(the script's own .to(device) calls are left as they are: non_blocking is not injected)",
    params=(),
    apply=_apply_pin,
    undo_doc="DataLoader.__init__ restored",
    no_hit=NO_LOADER,
    model_input="phases_s.h2d",
    gpu_only=True,
))


def _batched_collate(batch: Any) -> Any:
    """What default_collate returns for a TensorDataset's samples: a list of the stacked tensors."""
    return list(batch) if isinstance(batch, tuple) else batch


def _apply_batched(applied: Applied, params: dict[str, Any], machine: Machine) -> None:
    def override(args: dict[str, Any]) -> None:
        dataset = args["dataset"]
        if not isinstance(dataset, TensorDataset) or type(dataset).__getitem__ is not TensorDataset.__getitem__:
            # A subclass with its own __getitem__ (a per-sample transform) may not take a list of indices.
            applied.note(f"left a loader of {type(dataset).__name__} alone: only a TensorDataset's own indexing "
                         "is known to take a list of indices and return the stacked batch")
            return
        if args["batch_sampler"] is not None or args["batch_size"] is None or args["collate_fn"] is not None:
            applied.note("left a loader alone: it has its own batch_sampler, batch_size=None or its own collate_fn")
            return
        sampler = args["sampler"]
        if sampler is None:
            # The sampler DataLoader itself would build, with the same generator: the same order.
            sampler = RandomSampler(dataset, generator=args["generator"]) if args["shuffle"] else SequentialSampler(dataset)
        args.update(sampler=BatchSampler(sampler, args["batch_size"], args["drop_last"]), batch_size=None,
                    shuffle=None, drop_last=False, collate_fn=_batched_collate)
        applied.hits += 1

    override_loader_args(applied, ORDER_FETCH, override)


BATCHED_FETCH = register(FixUnit(
    id="batched_fetch",
    title="batched fetch",
    changes="an in-memory TensorDataset indexed once per batch (dataset[indices]) instead of once per "
            "sample and collated; same samples, same order (loader.batch_size then reads None)",
    params=(),
    apply=_apply_batched,
    undo_doc="DataLoader.__init__ restored",
    no_hit="no DataLoader over a TensorDataset with the default batching",
    model_input="load_cpu_s",
))
