"""Reads the job's configuration as the hooks see it: model, optimizers, loaders, first batch.

Everything here is read-only on the user's objects and runs once per object (first forward of a
model, first step of an optimizer, first batch of a loader), so it stays off the hot path.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

import torch

from stave import device as dev
from stave.capture import batch_walk
from stave.capture.batch_walk import iter_tensors
from stave.measure.config import ConfigSnapshot, LoaderInfo, OptimizerInfo, TensorInfo

log = logging.getLogger(__name__)

# Bound the walk through a batch or a dataset's attributes: enough for real nested structures,
# small enough that a pathological object graph costs nothing noticeable.
MAX_BATCH_TENSORS = 32
MAX_SCAN_OBJECTS = 400
MAX_SCAN_DEPTH = 3


def tensor_info(path: str, t: torch.Tensor) -> TensorInfo:
    """Describe one tensor of a batch."""
    fmt = "contiguous"
    if t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last):
        fmt = "channels_last"
    elif not t.is_contiguous():
        fmt = "strided"
    return TensorInfo(
        path=path,
        dtype=str(t.dtype).replace("torch.", ""),
        shape=list(t.shape),
        device=str(t.device),
        nbytes=t.numel() * t.element_size(),
        memory_format=fmt,
        pinned=dev.is_pinned(t),
    )


def batch_tensors(batch: Any, path: str = "batch") -> list[TensorInfo]:
    """Every tensor in a (nested) batch of any structure, with its path, up to :data:`MAX_BATCH_TENSORS`."""
    return [tensor_info(where, t) for where, t in list(iter_tensors(batch, path))[:MAX_BATCH_TENSORS]]


def batch_samples(batch: Any, fallback: int | None) -> int:
    """Samples in a batch (its token rows, else its first tensor's first dimension, else ``fallback``)."""
    return batch_walk.batch_samples(batch, fallback)


# Handle types that must not be shared between a process and its forked children: the child
# inherits the open descriptor and its file offset / library state, and concurrent use from
# several workers corrupts reads (HDF5, LMDB) or interleaves them (plain files, sockets).
_UNSAFE_TYPES: dict[tuple[str, str], str] = {
    ("h5py._hl.files", "File"): "h5py.File",
    ("lmdb", "Environment"): "lmdb.Environment",
    ("lmdb.cffi", "Environment"): "lmdb.Environment",
    ("sqlite3", "Connection"): "sqlite3.Connection",
    ("socket", "socket"): "socket",
    ("zipfile", "ZipFile"): "zipfile.ZipFile",
    ("tarfile", "TarFile"): "tarfile.TarFile",
}


def _handle_kind(obj: Any) -> str | None:
    import io

    if isinstance(obj, io.IOBase):
        return None if obj.closed else f"open file ({type(obj).__name__})"
    cls = type(obj)
    kind = _UNSAFE_TYPES.get((cls.__module__, cls.__name__))
    if kind is None:
        return None
    if kind == "h5py.File" and not bool(obj):
        return None  # a closed h5py File is falsy
    if kind == "zipfile.ZipFile" and getattr(obj, "fp", None) is None:
        return None
    return kind


def scan_dataset(dataset: Any) -> tuple[list[str], list[str]]:
    """Find open handles and on-disk paths held by a dataset (bounded walk of its attributes).

    Returns (unsafe handles as "dataset.attr -> kind", existing paths).
    """
    handles: list[str] = []
    paths: list[str] = []
    seen: set[int] = set()
    queue: list[tuple[Any, str, int]] = [(dataset, "dataset", 0)]
    visited = 0
    while queue and visited < MAX_SCAN_OBJECTS:
        obj, where, depth = queue.pop(0)
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        visited += 1
        kind = _handle_kind(obj)
        if kind is not None:
            handles.append(f"{where} -> {kind}")
            continue
        if isinstance(obj, (str, os.PathLike)) and depth > 0:
            text = os.fspath(obj)
            if isinstance(text, str) and len(text) < 4096 and os.path.exists(text) and text not in paths:
                paths.append(text)
            continue
        if depth >= MAX_SCAN_DEPTH or isinstance(obj, (int, float, bool, bytes, torch.Tensor)):
            continue
        if isinstance(obj, (list, tuple)):
            # Lists of file paths are common (ImageFolder.samples); the first few tell us the tree.
            for i, item in enumerate(obj[:3]):
                queue.append((item, f"{where}[{i}]", depth + 1))
        elif isinstance(obj, dict):
            for key in list(obj)[:20]:
                queue.append((obj[key], f"{where}[{key!r}]", depth + 1))
        elif hasattr(obj, "__dict__") and not isinstance(obj, type):
            for key, value in list(vars(obj).items())[:50]:
                queue.append((value, f"{where}.{key}", depth + 1))
    return handles, paths


def _sampler_type(loader: Any) -> str:
    """The class that orders the samples: the batch sampler's inner sampler, or a custom batch sampler
    itself (one written to group by length has no ``sampler`` attribute)."""
    batch_sampler = loader.batch_sampler
    if batch_sampler is None:
        return type(loader.sampler).__name__
    return type(getattr(batch_sampler, "sampler", batch_sampler)).__name__


def loader_info(loader: Any, loader_id: int) -> LoaderInfo:
    """Describe a DataLoader (settings only; counters are filled as it runs)."""
    import multiprocessing

    ctx = loader.multiprocessing_context
    if loader.num_workers > 0:
        method = ctx.get_start_method() if ctx is not None else multiprocessing.get_start_method()
    else:
        method = None
    dataset = loader.dataset
    try:
        length: int | None = len(dataset)
    except TypeError:
        length = None
    iterable = isinstance(dataset, torch.utils.data.IterableDataset)
    info = LoaderInfo(
        loader_id=loader_id,
        num_workers=int(loader.num_workers),
        batch_size=loader.batch_size,
        pin_memory=bool(loader.pin_memory),
        persistent_workers=bool(loader.persistent_workers),
        prefetch_factor=loader.prefetch_factor if loader.num_workers > 0 else None,
        drop_last=bool(loader.drop_last),
        multiprocessing_context=method,
        dataset_type=type(dataset).__name__,
        dataset_len=length,
        sampler_type=_sampler_type(loader),
        iterable_dataset=iterable,
    )
    handles, paths = scan_dataset(dataset)
    # Inherited handles only matter when workers are forked from this process.
    if loader.num_workers > 0 and method == "fork":
        info.fork_unsafe_handles = handles
    info.dataset_paths = paths[:16]
    return info


# Distinct parameter sizes kept per optimizer; beyond it sizes go to power-of-two buckets (the probe
# needs the per-tensor cost at about the right size, not every size).
MAX_PARAM_SIZES = 64


def param_size_counts(numels: list[int], max_sizes: int = MAX_PARAM_SIZES) -> list[list[int]]:
    """``[values, tensors]`` pairs of ``numels``, largest first; power-of-two buckets past ``max_sizes``."""
    counts: dict[int, int] = {}
    for n in numels:
        counts[n] = counts.get(n, 0) + 1
    if len(counts) > max_sizes:
        bucketed: dict[int, int] = {}
        for n, c in counts.items():
            key = 1 << max(0, round(math.log2(max(n, 1))))
            bucketed[key] = bucketed.get(key, 0) + c
        counts = bucketed
    return [[n, c] for n, c in sorted(counts.items(), reverse=True)]


def optimizer_info(opt: torch.optim.Optimizer) -> OptimizerInfo:
    """Describe an optimizer from its parameter groups and defaults."""
    params = [p for group in opt.param_groups for p in group["params"]]
    defaults = getattr(opt, "defaults", {})
    return OptimizerInfo(
        type=type(opt).__name__,
        params=sum(p.numel() for p in params),
        param_tensors=len(params),
        foreach=defaults.get("foreach"),
        fused=defaults.get("fused"),
        param_sizes=param_size_counts([p.numel() for p in params]),
    )


def describe_model(module: torch.nn.Module, snap: ConfigSnapshot) -> None:
    """Fill the model facts of ``snap`` from the outermost module with the most parameters."""
    from torch.nn.parallel import DataParallel, DistributedDataParallel

    snap.model_class = type(module).__name__
    snap.compiled = type(module).__name__ == "OptimizedModule" or getattr(module, "_compiled_call_impl", None) is not None
    # torch.compile(model, dynamic=...) as passed (a private attribute of dynamo's context: None
    # where it is absent or was not given).
    dynamic = getattr(getattr(module, "dynamo_ctx", None), "_dynamic", None)
    snap.compile_dynamic = dynamic if isinstance(dynamic, bool) else None
    snap.dataparallel = isinstance(module, DataParallel)
    snap.ddp = isinstance(module, DistributedDataParallel)
    if snap.ddp:
        snap.ddp_find_unused_parameters = bool(getattr(module, "find_unused_parameters", False))
    dtypes: dict[str, int] = {}
    total = 0
    for p in module.parameters():
        key = str(p.dtype).replace("torch.", "")
        dtypes[key] = dtypes.get(key, 0) + p.numel()
        total += p.numel()
    snap.model_params = total
    snap.param_dtypes = dtypes
    hf_config = getattr(module, "config", None)
    attn = getattr(hf_config, "_attn_implementation", None)
    snap.attn_implementation = attn if isinstance(attn, str) else None
    if snap.attn_implementation is not None:
        snap.attention_geometry = attention_geometry(hf_config, type(module).__name__)
    convs = [m for m in module.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Conv3d))]
    snap.conv_model = bool(convs)
    if convs:
        w = convs[0].weight
        snap.model_memory_format = (
            "channels_last" if w.dim() == 4 and w.is_contiguous(memory_format=torch.channels_last)
            and not w.is_contiguous() else "contiguous"
        )


def _first_int(obj: Any, names: tuple[str, ...]) -> int | None:
    for name in names:
        value = getattr(obj, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def attention_geometry(config: Any, model_class: str) -> list[int]:
    """``[layers, heads, head_dim, causal]`` from a Hugging Face config (the names GPT-2, BERT and
    Llama-style configs use); empty when it does not say."""
    layers = _first_int(config, ("num_hidden_layers", "n_layer", "num_layers"))
    heads = _first_int(config, ("num_attention_heads", "n_head"))
    hidden = _first_int(config, ("hidden_size", "n_embd", "d_model"))
    head_dim = _first_int(config, ("head_dim",)) or (hidden // heads if hidden and heads else None)
    if not (layers and heads and head_dim):
        return []
    causal = bool(getattr(config, "is_decoder", False)) or "CausalLM" in model_class or "LMHead" in model_class
    return [layers, heads, head_dim, int(causal)]


def autocast_state(device_type: str) -> tuple[bool, str | None]:
    """Whether autocast is on for ``device_type`` right now, and its dtype."""
    try:
        enabled = torch.is_autocast_enabled(device_type)
    except TypeError:  # older signature without a device argument
        enabled = torch.is_autocast_enabled()
    if not enabled:
        return False, None
    return True, str(torch.get_autocast_dtype(device_type)).replace("torch.", "")


def global_settings(snap: ConfigSnapshot) -> None:
    """Threads, cores, cuDNN and determinism settings as they are now."""
    snap.torch_threads = torch.get_num_threads()
    snap.torch_interop_threads = torch.get_num_interop_threads()
    snap.cores_usable = dev.usable_cores()
    snap.cores_total = os.cpu_count()
    flags = dev.cudnn_flags()
    snap.cudnn_benchmark = flags["cudnn_benchmark"]
    snap.cudnn_deterministic = flags["cudnn_deterministic"]
    snap.deterministic_algorithms = torch.are_deterministic_algorithms_enabled()


def dataset_size_on_disk(paths: list[str], budget_files: int = 200_000) -> tuple[int | None, int | None]:
    """Total bytes and files under ``paths`` (a bounded walk; None when nothing could be read)."""
    total = 0
    files = 0
    seen_any = False
    roots: list[str] = []
    for path in sorted({os.path.abspath(p) for p in paths}):
        # A file listed inside a directory we already walk must not count twice.
        if not any(path.startswith(r.rstrip(os.sep) + os.sep) for r in roots):
            roots.append(path)
    for root in roots:
        if os.path.isfile(root):
            try:
                total += os.path.getsize(root)
                files += 1
                seen_any = True
            except OSError:
                continue
            continue
        for dirpath, _dirs, names in os.walk(root):
            for name in names:
                try:
                    total += os.path.getsize(os.path.join(dirpath, name))
                except OSError:
                    continue
                files += 1
                seen_any = True
                if files >= budget_files:
                    return total, files
    return (total, files) if seen_any else (None, None)
