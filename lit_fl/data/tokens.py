"""Token sequences (next-token prediction): the special tokens every sequence dataset of lit-fl uses and which
targets count.

lit-fl follows FedJAX's datasets (``fedjax/datasets/stackoverflow.py``, ``fedjax/datasets/shakespeare.py``): token
``0`` is PAD, ``1`` BOS and ``2`` EOS; out-of-vocabulary tokens take ids after the vocabulary. A sequence dataset
holds ``x`` and ``y`` of shape ``(N, T)`` (int64), ``y`` the next token of every position of ``x`` and PAD after the
sequence ends. A user's own sequence dataset uses the same ids.

* the training loss (cross-entropy, WSM, distillation) is over the targets that are not PAD
  (FedJAX: ``per_token_loss *= targets != pad``);
* next-token accuracy counts the targets that are neither PAD nor EOS: FedJAX's ``accuracy_no_eos``,
  ``SequenceTokenAccuracy(masked_target_values=(pad, eos))``.
"""

from __future__ import annotations

import torch
from torch import Tensor

PAD, BOS, EOS = 0, 1, 2
#: targets left out of next-token accuracy (FedJAX ``accuracy_no_eos``)
UNCOUNTED = (PAD, EOS)


def is_token_batch(x: Tensor) -> bool:
    """Whether ``x`` is a batch of token sequences ``(B, T)`` of integers (not images)."""
    return x.ndim == 2 and not torch.is_floating_point(x)


def trained_targets(y: Tensor) -> Tensor:
    """Where a loss counts a target: every position whose target is not PAD."""
    return y != PAD


def counted_targets(y: Tensor) -> Tensor:
    """Where accuracy counts a target: neither PAD nor EOS (FedJAX ``accuracy_no_eos``)."""
    return (y != PAD) & (y != EOS)


def correct_counts(logits: Tensor, y: Tensor, sequence: bool) -> Tensor:
    """Per sample, how many of its predictions count as correct: for classification (``logits [..., B, C]``,
    ``y [B]`` or matching leading dims) 1 or 0 for the top-1 class; for sequences (``logits [..., B, T, V]``,
    ``y [..., B, T]``) the number of positions whose argmax equals a counted target (:func:`counted_targets`)."""
    hit = logits.argmax(-1) == y
    if not sequence:
        return hit.long()
    return (hit & counted_targets(y)).sum(-1)


def counted_totals(y: Tensor, sequence: bool) -> Tensor:
    """Per sample, how many predictions count: 1 for classification, the counted targets of a sequence."""
    if not sequence:
        return torch.ones(len(y), dtype=torch.long, device=y.device)
    return counted_targets(y).sum(-1)
