"""Which token id is padding, when the batch carries no attention mask and the model no ``pad_token_id``.

A plain model fed ``[batch, sequence]`` ids padded to a fixed length says nowhere which id is the
pad. It can be inferred, but only from evidence that can be stated in the report:

1. **declared** by the model: a Hugging Face config's ``pad_token_id``, or the ``padding_idx`` of
   the model's token embeddings (when every embedding that declares one declares the same id);
2. **declared by the loss**: a ``CrossEntropyLoss``/``NLLLoss`` module with an ``ignore_index``
   that is a token id (>= 0, not PyTorch's default -100), accepted once that id fills the row
   tails of a batch (the loss ignoring an id that never pads the inputs says nothing about them);
3. **observed**: one id fills the tails (or the heads, for left padding) of rows in
   :data:`MIN_AGREEING_BATCHES` batches in a row, and almost never appears anywhere else. A token
   that is merely frequent (a space, ``the``) ends a few rows by chance but mostly sits inside
   them, and its chance tails are a sliver of the positions: it is not taken for padding.

The observed test reads the ids, so it runs only on CPU tensors (reading a CUDA tensor in the
user's loop would wait for the queued step); on a GPU the declared evidence is what counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import torch
from torch import nn

# Rows' tail (or head) runs of one id must cover at least this share of a batch's positions: below
# it, padding (if it were padding) could not make PADDING_WASTE's 10 % anyway, and chance tails of
# a frequent token stay far under it.
MIN_RUN_SHARE = 0.05
# At most this share of the id's occurrences may lie outside the rows' tail runs: a pad id appears
# only as padding (an end-of-text id reused as pad adds one per row, well under this).
MAX_OUTSIDE_SHARE = 0.10
# Batches in a row whose observed evidence must name the same id before it counts as padding (a
# batch without any tail runs neither confirms nor breaks the streak).
MIN_AGREEING_BATCHES = 3
# Loss classes whose ``ignore_index`` names a token id the loss skips.
LOSS_TYPES = (nn.CrossEntropyLoss, nn.NLLLoss)


@dataclass(frozen=True)
class PadEvidence:
    """A pad id and where it came from (``source`` is one of the module docstring's kinds)."""

    pad_id: int
    source: str  # "config.pad_token_id", "embedding.padding_idx", "loss.ignore_index", "row tails"


def declared_pad_id(model: nn.Module) -> PadEvidence | None:
    """The pad id the model declares: its config's ``pad_token_id``, else its embeddings' ``padding_idx``."""
    pad = getattr(getattr(model, "config", None), "pad_token_id", None)
    if isinstance(pad, int) and not isinstance(pad, bool) and pad >= 0:
        return PadEvidence(pad, "config.pad_token_id")
    declared = {m.padding_idx for m in model.modules() if isinstance(m, nn.Embedding) and m.padding_idx is not None}
    if len(declared) == 1:
        (idx,) = declared
        return PadEvidence(int(idx), "embedding.padding_idx")
    return None  # none declared, or several embeddings that disagree: nothing to state


def loss_ignore_ids(modules: Iterable[nn.Module]) -> set[int]:
    """Token ids that loss modules among ``modules`` ignore (PyTorch's default -100 is no token)."""
    return {int(m.ignore_index) for m in modules if isinstance(m, LOSS_TYPES) and m.ignore_index >= 0}


def _run_lengths(ids: torch.Tensor, value: int, from_end: bool) -> torch.Tensor:
    """Per row, how many positions at the end (``from_end``) or the start hold ``value`` in a run."""
    hit = ids == value
    if from_end:
        hit = hit.flip(1)
    # cumprod stays 1 while the run lasts and drops to 0 at its first break
    return hit.to(torch.int32).cumprod(dim=1).sum(dim=1)


def padding_runs(ids: torch.Tensor, value: int) -> tuple[torch.Tensor, bool] | None:
    """Row runs of ``value`` (tails, else heads) when they look like padding in this batch, else None.

    Padding-like: the runs cover at least :data:`MIN_RUN_SHARE` of the positions and at most
    :data:`MAX_OUTSIDE_SHARE` of ``value``'s occurrences lie outside them. Returns the run lengths
    and whether they are tails (right padding).
    """
    positions = ids.numel()
    occurrences = int((ids == value).sum())
    if positions == 0 or occurrences == 0:
        return None
    for from_end in (True, False):
        runs = _run_lengths(ids, value, from_end)
        in_runs = int(runs.sum())
        if in_runs >= MIN_RUN_SHARE * positions and occurrences - in_runs <= MAX_OUTSIDE_SHARE * occurrences:
            return runs, from_end
    return None


def tail_candidate(ids: torch.Tensor) -> int | None:
    """The id that pads this batch's rows (right or left), or None when no id fills row ends like padding."""
    if ids.dim() != 2 or ids.shape[1] < 2 or ids.numel() == 0:
        return None
    for column in (ids[:, -1], ids[:, 0]):
        value = int(torch.mode(column).values)
        if padding_runs(ids, value) is not None:
            return value
    return None


class PadIdInference:
    """Decides the pad id of one model's token inputs over the batches it sees (see the module docstring).

    ``pad_id(model, ids, loss_ids)`` returns the id to count real tokens with (None until one is
    known); ``evidence`` says where it came from.
    """

    def __init__(self) -> None:
        self.evidence: PadEvidence | None = None
        self._streak_id: int | None = None
        self._streak = 0

    def pad_id(self, model: nn.Module, ids: torch.Tensor, loss_ids: Iterable[int] = ()) -> int | None:
        """The pad id for ``ids`` fed to ``model``; ``loss_ids``: ignore indices of losses run outside it."""
        if self.evidence is None:
            self.evidence = declared_pad_id(model)
        if self.evidence is None and ids.device.type == "cpu":
            self._observe(ids, set(loss_ids) | loss_ignore_ids(model.modules()))
        return self.evidence.pad_id if self.evidence is not None else None

    def _observe(self, ids: torch.Tensor, loss_ids: set[int]) -> None:
        for value in sorted(loss_ids):
            if padding_runs(ids, value) is not None:
                self.evidence = PadEvidence(value, "loss.ignore_index")
                return
        value = tail_candidate(ids)
        if value is None:
            # No id pads this batch. A full batch (no tails) says nothing; but the streak's id
            # appearing here only inside rows is evidence against it.
            if self._streak_id is not None and bool((ids == self._streak_id).any()):
                self._streak_id, self._streak = None, 0
            return
        self._streak = self._streak + 1 if value == self._streak_id else 1
        self._streak_id = value
        if self._streak >= MIN_AGREEING_BATCHES:
            self.evidence = PadEvidence(value, "row tails")
