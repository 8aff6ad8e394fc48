"""A phase's mean loss, read from its step: the step's own loss counter, or what its ``training_step`` returned.

Below both the runner (:mod:`lit_fl.steps.runner`, which trains a step) and the phase runner
(:mod:`lit_fl.steps.phase`, which runs the clients' steps through it); both read their losses here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    import lightning as L


def reset_loss_counter(step: L.LightningModule) -> None:
    """Start ``step``'s own loss counter (what :func:`phase_loss` reads): ``loss_sum`` 0, ``num_batches`` 0."""
    step.loss_sum = torch.zeros(())
    step.num_batches = 0


def count_loss(step: L.LightningModule, loss: Tensor) -> None:
    """Add one batch's ``loss`` to ``step``'s counter (on the loss's device, without its graph)."""
    step.loss_sum = step.loss_sum.to(loss.device) + loss.detach()
    step.num_batches += 1


def has_loss_counter(step: L.LightningModule) -> bool:
    """Whether ``step`` keeps its own ``loss_sum`` and ``num_batches`` (every built-in step does)."""
    return hasattr(step, "loss_sum") and hasattr(step, "num_batches")


def phase_loss(step: L.LightningModule, returned: Sequence[Tensor]) -> float:
    """A phase's mean loss per batch, read from the device once: the step's own ``loss_sum / num_batches`` when it
    keeps them (exact over processes), else the mean of what ``training_step`` returned (a step of your own needs
    no counter); 0.0 for a phase without a batch."""
    if has_loss_counter(step):
        return float(step.loss_sum) / max(step.num_batches, 1)
    return float(torch.stack(list(returned)).sum()) / len(returned) if returned else 0.0
