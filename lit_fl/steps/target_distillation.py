"""``TargetDistillation``: a model learns fixed per-sample targets on unlabeled inputs (FedMD's digest, DS-FL's
distillation from the aggregated soft labels).

The batches are ``(x, t)`` pairs: ``x`` the public inputs, ``t`` the target of each sample (a row of class scores
or probabilities, computed before the phase and fixed during it). The loss per batch is

* ``l1``: ``mean_{i,c} |z_ic - t_ic|`` over the batch's samples ``i`` and classes ``c``, ``z`` the model's logits
  (FedMD: the model without its softmax "trained to approach the consensus"; the reference code's Keras
  ``mean_absolute_error`` on logits);
* ``mse``: ``mean_{i,c} (z_ic - t_ic)^2``;
* ``kl``: ``KL(t || softmax(z)) = 1/B sum_i sum_c t_ic (log t_ic - log softmax(z)_ic)`` (``0 log 0 = 0``): the
  cross-entropy with soft labels ``t`` up to ``t``'s entropy, a constant (DS-FL Eq. of the distillation step).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Literal

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lit_fl.steps.optim import SGDConfig

TargetLoss = Literal["l1", "mse", "kl"]
TARGET_LOSSES: tuple[str, ...] = ("l1", "mse", "kl")


def target_loss(logits: Tensor, targets: Tensor, loss: TargetLoss) -> Tensor:
    """The loss of ``logits`` against fixed ``targets`` (see the module docstring), in float32."""
    z, t = logits.float(), targets.float()
    if loss == "l1":
        return (z - t).abs().mean()
    if loss == "mse":
        return (z - t).pow(2).mean()
    if loss == "kl":
        return F.kl_div(F.log_softmax(z, dim=1), t, reduction="batchmean")
    raise ValueError(f"target loss must be one of {', '.join(TARGET_LOSSES)}, got {loss!r}")


class TargetDistillation(L.LightningModule):
    """``model`` trained by SGD (``optimizer``) on :func:`target_loss` over ``(x, targets)`` batches.

    Args:
        model: the model trained (in place).
        loss: ``l1``, ``mse`` (on logits) or ``kl`` (targets are probabilities).
        optimizer: its SGD settings.
    """

    def __init__(self, model: nn.Module, loss: TargetLoss, optimizer: SGDConfig | None = None) -> None:
        super().__init__()
        if loss not in TARGET_LOSSES:
            raise ValueError(f"loss must be one of {', '.join(TARGET_LOSSES)}, got {loss!r}")
        self.model = model
        self.loss_name: TargetLoss = loss
        self.optimizer_config = optimizer or SGDConfig()
        self.loss_sum = torch.zeros(())
        self.num_batches = 0

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, targets = batch
        loss = target_loss(self.model(x), targets, self.loss_name)
        self.loss_sum = self.loss_sum.to(loss.device) + loss.detach()
        self.num_batches += 1
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.optimizer_config.build(self.model.parameters())

    def fusion_key(self) -> Hashable | None:
        """Never fused: every client's targets are its own tensor (runs one client at a time, still placed)."""
        return None
