"""Finds the tensors in a batch of any structure, and counts samples and tokens from them.

Framework batches are rarely a plain tensor: Hugging Face collators hand out ``BatchEncoding``
(a ``UserDict``), Lightning and accelerate pass dicts or dataclasses through, and loops like
nanoGPT's slice their own integer tensors and feed them to the model's forward. This module walks
all of those (mappings, dataclasses, named tuples, lists, nested) without copying or syncing a
tensor, and reads the language-model conventions: ``input_ids`` (or the integer matrix an
embedding model takes) gives samples and tokens, ``attention_mask`` (or a known pad id) the real,
non-padding tokens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Iterator

import torch

# Bound the walk: enough for real nested batches, nothing noticeable on a pathological object.
MAX_TENSORS = 32
MAX_DEPTH = 6
# Names under which batches carry token ids and their padding mask (Hugging Face, nanoGPT, torchtext).
TOKEN_ID_NAMES = ("input_ids", "idx", "tokens", "token_ids", "src", "x")
MASK_NAMES = ("attention_mask",)
_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.uint8)


def iter_tensors(obj: Any, path: str = "batch") -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(path, tensor)`` for every tensor in ``obj``, depth first, up to :data:`MAX_TENSORS`."""
    count = 0

    def walk(item: Any, where: str, depth: int) -> Iterator[tuple[str, torch.Tensor]]:
        nonlocal count
        if count >= MAX_TENSORS or depth > MAX_DEPTH:
            return
        if isinstance(item, torch.Tensor):
            count += 1
            yield where, item
        elif isinstance(item, Mapping):
            # dict, UserDict (transformers' BatchEncoding), OrderedDict, ModelOutput
            for key in list(item.keys()):
                yield from walk(item[key], f"{where}[{key!r}]", depth + 1)
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            for f in dataclasses.fields(item):
                yield from walk(getattr(item, f.name, None), f"{where}.{f.name}", depth + 1)
        elif isinstance(item, (list, tuple)):
            fields = getattr(item, "_fields", None)  # a named tuple: keep its names in the path
            for i, value in enumerate(item):
                label = f"{where}.{fields[i]}" if fields and i < len(fields) else f"{where}[{i}]"
                yield from walk(value, label, depth + 1)

    yield from walk(obj, path, 0)


def _leaf_name(path: str) -> str:
    """The last key of a path: ``batch['input_ids']`` -> ``input_ids``, ``batch.x`` -> ``x``."""
    tail = path.rsplit("[", 1)[-1] if path.endswith("]") else path.rsplit(".", 1)[-1]
    return tail.strip("[]'\"")


def is_token_tensor(t: torch.Tensor) -> bool:
    """An integer matrix ``[batch, sequence]``: token ids (not labels: those are 1-D)."""
    return t.dim() == 2 and t.dtype in _INT_DTYPES and t.shape[0] > 0 and t.shape[1] > 1


def find_tokens(named: list[tuple[str, torch.Tensor]]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The token-id tensor and its attention mask among ``named`` tensors (either may be None).

    A tensor named like token ids wins; otherwise the first integer ``[batch, sequence]`` matrix
    that is not a mask. The mask must have the ids' shape.
    """
    ids = None
    mask = None
    for path, t in named:
        name = _leaf_name(path)
        if name in MASK_NAMES and t.dim() == 2:
            mask = t
        elif ids is None and name in TOKEN_ID_NAMES and is_token_tensor(t):
            ids = t
    if ids is None:
        for path, t in named:
            if _leaf_name(path) not in MASK_NAMES and "label" not in _leaf_name(path) and is_token_tensor(t):
                ids = t
                break
    if mask is not None and (ids is None or tuple(mask.shape) != tuple(ids.shape)):
        mask = None if ids is not None else mask
    return ids, mask


def batch_samples(obj: Any, fallback: int | None) -> int:
    """Samples in a batch: rows of its token ids when it has any, else the first dimension of its
    first tensor, else ``fallback`` (the loader's batch size), else 1."""
    named = list(iter_tensors(obj))
    ids, _mask = find_tokens(named)
    if ids is not None:
        return int(ids.shape[0])
    for _path, t in named:
        return int(t.shape[0]) if t.dim() > 0 else 1
    return fallback or 1


@dataclass
class TokenCount:
    """Tokens of one model input: ``rows`` samples of ``width`` positions.

    ``row_lengths`` holds the real (non-padding) length of each row: a list of ints, or a 1-D
    tensor still on the device (read once the step is resolved, so no synchronization is added to
    the user's loop), or None when nothing says which positions are padding.
    """

    rows: int
    width: int
    row_lengths: Any = None

    @property
    def tokens(self) -> int:
        """Positions fed, padding included."""
        return self.rows * self.width


def seq_first(module: torch.nn.Module) -> bool:
    """Whether ``module`` takes its token ids sequence-first, ``(positions, rows)``: it holds a
    recurrent layer or a ``torch.nn`` transformer built with ``batch_first=False`` (their default,
    which pytorch/examples' word language model keeps) and none built batch-first. Attention
    modules alone do not say: models that use ``nn.MultiheadAttention`` sequence-first often take
    batch-first inputs and transpose them inside."""
    layouts = set()
    for sub in module.modules():
        if isinstance(sub, (torch.nn.RNNBase, torch.nn.TransformerEncoderLayer, torch.nn.TransformerDecoderLayer,
                            torch.nn.Transformer)):
            layouts.add(bool(getattr(sub, "batch_first", False) or getattr(getattr(sub, "self_attn", None),
                                                                            "batch_first", False)))
    return layouts == {False}


def count_tokens(ids: torch.Tensor, mask: torch.Tensor | None, pad_id: int | None = None) -> TokenCount:
    """Count the tokens of one input; the real lengths come from the mask, else the pad id.

    On a CPU tensor the lengths are read at once. On a CUDA tensor the (tiny) reduction and a
    non-blocking copy into pinned host memory are queued on the user's stream; the host buffer is
    read by :func:`resolve_lengths` once the step's end event has passed, so no synchronization
    is added (reading the device tensor itself would wait for the whole queued step).
    """
    rows, width = int(ids.shape[0]), int(ids.shape[1])
    lengths: Any = None
    with torch.no_grad():
        if mask is not None:
            lengths = (mask != 0).sum(dim=1)
        elif pad_id is not None:
            lengths = (ids != pad_id).sum(dim=1)
    if lengths is not None and lengths.device.type == "cpu":
        lengths = lengths.tolist()
    elif lengths is not None and lengths.device.type == "cuda":
        host = torch.empty(lengths.shape, dtype=lengths.dtype, pin_memory=True)
        host.copy_(lengths, non_blocking=True)
        lengths = host
    return TokenCount(rows, width, lengths)


def resolve_lengths(lengths: Any) -> list[int] | None:
    """Row lengths as ints (a device tensor is copied back; call once its step is done)."""
    if lengths is None:
        return None
    if isinstance(lengths, torch.Tensor):
        return [int(v) for v in lengths.tolist()]
    return [int(v) for v in lengths]


@dataclass
class TokenTotals:
    """Token sums of one step (see :class:`~stave.measure.steps.StepRecord` for the fields)."""

    tokens: int = 0
    real_tokens: int = 0
    longest_tokens: int = 0
    token_sq: int = 0
    real_token_sq: int = 0
    longest_token_sq: int = 0

    def add(self, count: TokenCount) -> None:
        """Add one input's tokens; without row lengths every position counts as real."""
        lengths = resolve_lengths(count.row_lengths)
        if lengths is None:
            lengths = [count.width] * count.rows
        longest = max(lengths) if lengths else 0
        self.tokens += count.tokens
        self.real_tokens += sum(lengths)
        self.longest_tokens += count.rows * longest
        self.token_sq += count.rows * count.width * count.width
        self.real_token_sq += sum(n * n for n in lengths)
        self.longest_token_sq += count.rows * longest * longest
