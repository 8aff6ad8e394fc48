"""``LogitTargetDistillation``: a model learns fixed soft targets on (unlabeled) inputs - federated distillation's
"digest" step (FDmeta, docs/baselines.md "FDmeta"), on the clients and on the server alike.

The batches are ``(x, t)`` with ``t`` the target LOGITS of each sample (the aggregated logits of federated
distillation, carried as the "labels" of a :class:`~lit_fl.data.batches.ClientBatches`); per batch

    ``L = T^2 * mean_x CE(softmax(t / T), softmax(model(x) / T))``

(:func:`~lit_fl.steps.noise_distillation.soft_cross_entropy`: the KL divergence from the targets up to the targets'
entropy, which has no gradient). The model trains in train mode (BatchNorm on the batch's statistics, running
statistics updated: the inputs are real data) by SGD with the given settings.
"""

from __future__ import annotations

import lightning as L
import torch
from torch import Tensor, nn

from lit_fl.steps.noise_distillation import soft_cross_entropy
from lit_fl.steps.optim import SGDConfig


class LogitTargetDistillation(L.LightningModule):
    """``model`` learns the soft targets of its batches; see the module docstring.

    Args:
        model: the student (updated in place).
        optimizer: its SGD settings.
        temperature: ``T`` of both softmaxes (the loss is scaled by ``T^2``).
    """

    def __init__(self, model: nn.Module, optimizer: SGDConfig, temperature: float = 1.0) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.model = model
        self.optimizer_config = optimizer
        self.temperature = float(temperature)
        self.loss_sum = torch.zeros(())
        self.num_batches = 0

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, target = batch
        loss = soft_cross_entropy(target, self.model(x), self.temperature)
        self.loss_sum = self.loss_sum.to(loss.device) + loss.detach()
        self.num_batches += 1
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.optimizer_config.build(self.model.parameters())
