"""Fingerprints of a dataset's first samples, so that ranks can tell whether they hold the same data.

Equal sample indices mean equal samples only over the same data. Ranks that read files say which
(``LoaderInfo.dataset_paths``); ranks that each build an in-memory dataset from their own shard
(``np.load(f"shard-{rank}.npy")`` into a ``TensorDataset``) leave no such trace. So each rank
digests ``dataset[i]`` for the first :data:`SAMPLES_DIGESTED` indices, component by component
(every tensor, array, number or string in the sample, in order), twice: a component whose two
digests differ is drawn at random (an augmentation) and says nothing about the data. Comparing
the deterministic components across ranks (:func:`stave.dist.sampling.content_match`) then tells
"same samples" from "each rank its own shard".

The digests are taken when the loader's first iterator starts, with the random states of
``random``, numpy and torch saved and restored around them, so the script's own random stream is
unchanged. Only the first :data:`LEAF_BYTES_DIGESTED` bytes of a component are hashed, and the
whole pass stops after :data:`DIGEST_BUDGET_S`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import random
import time
from collections.abc import Mapping
from typing import Any, Iterator

import numpy as np
import torch

from stave.dist.sampling import RANDOM_COMPONENT

log = logging.getLogger(__name__)

# Indices digested: two different shards agree on a varying component at every one of 16 indices
# only by chance (at most 2**-16 even for a binary label), and 2 x 16 reads of an in-memory
# dataset cost well under a millisecond each.
SAMPLES_DIGESTED = 16

# Bytes of one component hashed: samples of different shards differ from their first values on;
# the cap keeps a large sample (an image tensor) from costing more than a few microseconds.
LEAF_BYTES_DIGESTED = 64 * 1024

# Wall-time budget of the whole pass: a dataset whose reads are slow (it computes or fetches its
# samples) gets fewer digested indices rather than a slower start.
DIGEST_BUDGET_S = 0.5

# Components of one sample at most (a dict of many fields keeps its first ones).
MAX_LEAVES = 16


def _leaves(sample: Any, depth: int = 0) -> Iterator[Any]:
    """The sample's components in a stable order: tensors, arrays, numbers, strings."""
    if depth > 4:
        return
    if isinstance(sample, Mapping):
        for key in sorted(sample, key=str):
            yield from _leaves(sample[key], depth + 1)
    elif dataclasses.is_dataclass(sample) and not isinstance(sample, type):
        for f in dataclasses.fields(sample):
            yield from _leaves(getattr(sample, f.name), depth + 1)
    elif isinstance(sample, (list, tuple)):
        for item in sample:
            yield from _leaves(item, depth + 1)
    else:
        yield sample


def _leaf_digest(leaf: Any) -> str:
    """A short hash of one component's type, shape and first bytes."""
    h = hashlib.blake2b(digest_size=8)
    if isinstance(leaf, torch.Tensor):
        t = leaf.detach().reshape(-1)
        if t.device.type != "cpu" or t.is_sparse:
            return f"{type(leaf).__name__}:{t.dtype}:{tuple(leaf.shape)}"  # not read: no device sync
        h.update(f"{t.dtype}:{tuple(leaf.shape)}".encode())
        n = max(1, LEAF_BYTES_DIGESTED // max(1, t.element_size()))
        h.update(t[:n].contiguous().view(torch.uint8).numpy().tobytes())
    elif isinstance(leaf, np.ndarray):
        h.update(f"{leaf.dtype}:{leaf.shape}".encode())
        flat = np.ascontiguousarray(leaf.reshape(-1)[: max(1, LEAF_BYTES_DIGESTED // max(1, leaf.itemsize))])
        h.update(flat.tobytes())
    elif isinstance(leaf, (bool, int, float, complex, str, np.generic)):
        h.update(f"{type(leaf).__name__}:{leaf!r}".encode())
    elif isinstance(leaf, (bytes, bytearray)):
        h.update(bytes(leaf[:LEAF_BYTES_DIGESTED]))
    elif callable(getattr(leaf, "tobytes", None)):  # a PIL image and the like
        try:
            h.update(leaf.tobytes()[:LEAF_BYTES_DIGESTED])
        except (TypeError, ValueError, OSError):
            return type(leaf).__name__
    else:
        return type(leaf).__name__  # opaque: the same on every rank, so never informative
    return h.hexdigest()


def _sample_digests(dataset: Any, index: int) -> list[str]:
    return [_leaf_digest(leaf) for _, leaf in zip(range(MAX_LEAVES), _leaves(dataset[index]))]


def _reread(first: list[str], second: list[str]) -> list[str]:
    if len(first) != len(second):
        return [RANDOM_COMPONENT] * max(len(first), len(second))
    return [a if a == b else RANDOM_COMPONENT for a, b in zip(first, second)]


def dataset_digests(dataset: Any) -> list[list[str]]:
    """``[index][component]`` digests of ``dataset[0..n)``; ``[]`` when unreadable.

    Each index is read twice: a component whose two reads differ is :data:`RANDOM_COMPONENT`.

    A map-style dataset only (``len`` and ``__getitem__``); any error while reading stops the pass
    with what was digested so far (logged), since a dataset may refuse out-of-order reads.
    """
    try:
        n = min(SAMPLES_DIGESTED, len(dataset))
    except TypeError:
        return []
    states = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    out: list[list[str]] = []
    start = time.perf_counter()
    try:
        for i in range(n):
            out.append(_reread(_sample_digests(dataset, i), _sample_digests(dataset, i)))
            if time.perf_counter() - start > DIGEST_BUDGET_S:
                log.info("sample digests: stopped after %d of %d indices (budget %.1f s)", i + 1, n, DIGEST_BUDGET_S)
                break
    except Exception as exc:  # noqa: BLE001 - any error of the user's dataset: keep what was read
        log.info("sample digests: dataset[%d] failed (%s: %s); %d indices kept", len(out), type(exc).__name__, exc,
                 len(out))
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
    return out
