"""``SoftTargetDistillation``: one model learns fixed per-sample soft targets (KT-pFL's client distillation on public
data towards its personalized soft prediction, Zhang et al. 2021, Algorithm 1).

The batches are ``(x, t)`` with ``t`` the target probabilities of each sample (``[B, C]``, rows on the simplex)::

    L = weight * T^2 * mean_b KL(t_b || softmax(model(x_b) / T))

(``0 log 0 = 0``). The targets are constants: only the model is trained.
"""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lit_fl.steps.optim import SGDConfig


def soft_target_kl(logits: Tensor, target: Tensor, temperature: float = 1.0) -> Tensor:
    """``T^2 * mean_b KL(target_b || softmax(logits_b / T))`` in float32."""
    t = float(temperature)
    log_q = F.log_softmax(logits.float() / t, dim=1)
    return F.kl_div(log_q, target.float(), reduction="batchmean") * (t * t)


class SoftTargetDistillation(L.LightningModule):
    """Distil ``model`` towards the soft targets carried by the batches (see the module docstring).

    Args:
        model: the model trained (updated in place).
        temperature: ``T`` of the model's softmax (the targets are given at the same temperature); loss times ``T^2``.
        weight: the loss weight (KT-pFL's ``lambda``).
        optimizer: SGD settings (a fresh optimizer per phase).
    """

    def __init__(
        self, model: nn.Module, temperature: float = 1.0, weight: float = 1.0, optimizer: SGDConfig | None = None
    ) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if weight < 0:
            raise ValueError(f"weight must be >= 0, got {weight}")
        self.model = model
        self.temperature = float(temperature)
        self.weight = float(weight)
        self.optimizer_config = optimizer or SGDConfig()
        self.loss_sum = torch.zeros(())
        self.num_batches = 0

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, target = batch
        loss = self.weight * soft_target_kl(self.model(x), target, self.temperature)
        self.loss_sum = self.loss_sum.to(loss.device) + loss.detach()
        self.num_batches += 1
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.optimizer_config.build(self.model.parameters())
