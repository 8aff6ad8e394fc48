"""``LogitTargetDistillation``: a model learns fixed soft targets on (unlabeled) inputs - federated distillation's
"digest" step (FDmeta, docs/baselines.md "FDmeta"), on the clients and on the server alike.

The batches are ``(x, t)`` with ``t`` the target LOGITS of each sample (the aggregated logits of federated
distillation, carried as the "labels" of a :class:`~lit_fl.data.batches.ClientBatches`); per batch

    ``L = T^2 * mean_x CE(softmax(t / T), softmax(model(x) / T))``

(:func:`~lit_fl.steps.noise_distillation.soft_cross_entropy`: the KL divergence from the targets up to the targets'
entropy, which has no gradient). The model trains in train mode (BatchNorm on the batch's statistics, running
statistics updated: the inputs are real data) by SGD with the given settings. Clients' digests with the same SGD
settings and temperature run fused (:class:`BatchedLogitTargetDistillation`), each on its own batches of the
targets.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import astuple

import lightning as L
import torch
from torch import Tensor, nn

from lit_fl.steps.batched import BatchedClientStep, per_sample
from lit_fl.steps.noise_distillation import batched_soft_cross_entropy, soft_cross_entropy
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

    # -- fusion (the client-work contract, :func:`lit_fl.steps.phase.run_phase`) ----------------------------

    def fusion_key(self) -> Hashable | None:
        """Steps with the same SGD settings and temperature fuse (:meth:`batched`); None for a model with BatchNorm
        (padding would change its batch statistics) or random draws."""
        from lit_fl.steps.fusion import fusible

        if not (per_sample(self.model) and fusible(self.model)):
            return None
        return (type(self), astuple(self.optimizer_config), self.temperature)

    @classmethod
    def batched(cls, steps: Sequence[LogitTargetDistillation], num_batches: Sequence[int]) -> L.LightningModule:
        return BatchedLogitTargetDistillation(steps, num_batches)


class BatchedLogitTargetDistillation(BatchedClientStep):
    """G clients' :class:`LogitTargetDistillation` as one step: one slot of the G students (any architectures),
    every client's loss :func:`~lit_fl.steps.noise_distillation.batched_soft_cross_entropy` of its own batch's
    target logits (the stacked ``y``, ``[G, B, C]``) and its own student's logits."""

    def __init__(self, steps: Sequence[LogitTargetDistillation], num_batches: Sequence[int]) -> None:
        first = steps[0]
        super().__init__([[s.model for s in steps]], [True], [first.optimizer_config], num_batches)
        self.temperature = first.temperature

    def client_losses(self, x: Tensor, y: Tensor, weight: Tensor) -> Tensor:
        return batched_soft_cross_entropy(y, self.slot_logits(0, x), weight, self.temperature)
