"""Fused evaluation (``trainer.fuse``): the correct counts of G same-architecture models in one pass.

The G models run as one :class:`~lit_fl.steps.fusion.FusedModels` in eval mode: over the test set every batch is
shared; over the validation samples each model has its own (those of the clients that hold it), stacked
``[G, L, ...]`` and padded to the longest with copies of one of the model's own samples. In eval mode every
sample's prediction depends on that sample alone (BatchNorm uses its running statistics), so padding changes
nothing and padded positions are dropped from the counts. The counts are those of evaluating each model alone,
up to float32 rounding of the logits (a prediction can differ only where two classes' logits tie to 1e-6).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

import numpy as np
import torch
from torch import Tensor, nn

from lit_fl.data.tokens import correct_counts
from lit_fl.steps.fusion import FusedModels


@torch.no_grad()
def fused_correct(
    models: Sequence[nn.Module],
    test: tuple[Tensor, Tensor] | None,
    val_indices: Sequence[Sequence[Tensor]],
    train: tuple[Tensor, Tensor],
    batch_size: int,
    autocast: Callable[[], AbstractContextManager],
    sequence: bool = False,
) -> Tensor:
    """``[G, T + L]`` int64 on the device, model g's row: its correct count on ``test`` (when given, ``T = 1``),
    then its correct predictions on each sample of its validation index sets into ``train`` (``val_indices[g]``:
    one set per client that holds model g; padding after). :func:`row_counts` reads a row's counts. Models must be in
    eval mode. With ``sequence`` the counts are of correct counted tokens
    (:func:`~lit_fl.data.tokens.correct_counts`)."""
    group = FusedModels(models).eval()
    with torch.inference_mode(), autocast():
        columns = [_test_counts(group, *test, batch_size, sequence)[:, None]] if test is not None else []
        columns.append(_val_correct(group, val_indices, *train, batch_size, sequence))
        return torch.cat([c.to(torch.int64) for c in columns], dim=1)


def row_counts(row: np.ndarray, test: bool, sets: Sequence[Tensor]) -> list[int]:
    """A row of :func:`fused_correct` (read on the host) as counts: the test set's (when ``test``), then each
    validation set's."""
    return ([int(row[0])] if test else []) + split_counts(row[int(test) :], [len(i) for i in sets])


def split_counts(correct: np.ndarray, sizes: Sequence[int]) -> list[int]:
    """The number of True in each consecutive run of ``sizes`` entries of ``correct`` (padding after is ignored)."""
    bounds = np.cumsum([0, *sizes])
    return [int(correct[a:b].sum()) for a, b in zip(bounds[:-1], bounds[1:])]


def _test_counts(group: FusedModels, x: Tensor, y: Tensor, batch_size: int, sequence: bool) -> Tensor:
    """``[G]`` on the device: each model's correct count on the test set."""
    correct = torch.zeros(len(group.params[0]), dtype=torch.int64, device=y.device)
    for i in range(0, len(y), batch_size):
        correct += correct_counts(group(x[i : i + batch_size]), y[i : i + batch_size], sequence).sum(1)
    return correct


def _val_correct(group: FusedModels, val_indices: Sequence[Sequence[Tensor]], x: Tensor, y: Tensor,
                 batch_size: int, sequence: bool) -> Tensor:
    """``[G, L]`` on the device: model g's correct predictions on its i-th validation sample (padding after)."""
    per_model = [torch.cat(list(sets)) if sets else torch.zeros(0, dtype=torch.long) for sets in val_indices]
    longest = max(len(i) for i in per_model)
    if longest == 0:
        return torch.zeros(len(per_model), 0, dtype=torch.long, device=x.device)
    index = torch.stack([torch.cat([i, i[:1].expand(longest - len(i))]) if len(i) else torch.zeros(longest,
                         dtype=torch.long) for i in per_model]).to(x.device)
    parts = [correct_counts(group(x[index[:, s : s + batch_size]], per_model=True), y[index[:, s : s + batch_size]],
                            sequence) for s in range(0, longest, batch_size)]
    return torch.cat(parts, dim=1)
