"""``NotTrueDistillation``: FedNTD's local step (Lee et al., NeurIPS 2022, arXiv 2106.03097, Eq. 7): CE (or WSM) plus
``beta`` times the not-true distillation from the received global model, a frozen teacher
(:func:`~lit_fl.losses.not_true_kl`); and its fused form for G clients at once."""

from __future__ import annotations

import copy
from collections.abc import Hashable, Sequence
from dataclasses import astuple

import lightning as L
import torch
from torch import Tensor, nn

from lit_fl.choices import SupervisedLoss
from lit_fl.losses import batched_supervised_losses, not_true_kl
from lit_fl.steps.batched import BatchedClientStep, per_sample
from lit_fl.steps.local_training import LocalTraining
from lit_fl.steps.optim import SGDConfig
from lit_fl.steps.peer_learning import frozen_teacher_logits
from lit_fl.steps.step_loss import count_loss


class NotTrueDistillation(LocalTraining):
    """``L = sup(z, y) + beta * mean_i KL(q~_g,i || q~_i)`` (FedNTD Eq. 7) on the client's batches: ``z`` the
    model's logits, ``q~`` the softmax at temperature ``tau`` over the not-true logits. The teacher is a copy of
    ``model`` at construction (the global model the client received), in eval mode without gradient: its
    weights and buffers never change.

    Args:
        model: the client's model (already holding the global weights).
        class_proportions: ``beta`` of WSM (ignored by CE).
        loss: the supervised term (FedNTD: ``ce``).
        optimizer: SGD settings.
        tau: temperature of the not-true softmax.
        beta: weight of the not-true distillation.
    """

    def __init__(
        self,
        model: nn.Module,
        class_proportions: Tensor,
        loss: SupervisedLoss = "ce",
        optimizer: SGDConfig | None = None,
        tau: float = 1.0,
        beta: float = 1.0,
    ) -> None:
        if tau <= 0 or beta < 0:
            raise ValueError(f"NotTrueDistillation: tau must be > 0 and beta >= 0, got tau={tau}, beta={beta}")
        super().__init__(model, class_proportions, loss, optimizer)
        self.teacher = copy.deepcopy(model).requires_grad_(False)
        self.tau = float(tau)
        self.beta = float(beta)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        logits = self.model(x)
        loss = self.loss_fn(logits, y, self.class_proportions)
        if self.beta > 0:
            teacher = frozen_teacher_logits(self.teacher, x)
            loss = loss + self.beta * not_true_kl(logits, teacher, y, self.tau).mean()
        count_loss(self, loss)
        return loss

    def fusion_key(self) -> Hashable | None:
        """Steps with the same loss, SGD settings, ``tau`` and ``beta`` fuse (:meth:`batched`); None for a model
        with BatchNorm or random draws."""
        from lit_fl.steps.fusion import fusible

        if not (per_sample(self.model) and fusible(self.model)):
            return None
        return (type(self), self.loss_name, astuple(self.optimizer_config), self.tau, self.beta)

    @classmethod
    def batched(cls, steps: Sequence[LocalTraining], num_batches: Sequence[int]) -> L.LightningModule:
        return BatchedNotTrueDistillation(steps, num_batches)  # type: ignore[arg-type]


class BatchedNotTrueDistillation(BatchedClientStep):
    """G clients' :class:`NotTrueDistillation` as one step: slot 0 the G students (trained), slot 1 their G
    teachers (fixed: eval mode, no gradient, never written back), each client on its own batches."""

    def __init__(self, steps: Sequence[NotTrueDistillation], num_batches: Sequence[int]) -> None:
        first = steps[0]
        super().__init__([[s.model for s in steps], [s.teacher for s in steps]], [True, False],
                         [first.optimizer_config, first.optimizer_config], num_batches)
        self.register_buffer("class_proportions", torch.stack([s.class_proportions for s in steps]),
                             persistent=False)
        self.loss_name: SupervisedLoss = first.loss_name
        self.tau = first.tau
        self.beta = first.beta

    def client_losses(self, x: Tensor, y: Tensor, weight: Tensor) -> Tensor:
        logits = self.slot_logits(0, x)
        losses = batched_supervised_losses(logits, y, weight, self.class_proportions, self.loss_name)
        if self.beta > 0:
            ntd = not_true_kl(logits, self.slot_logits(1, x), y, self.tau)  # [G, B]
            losses = losses + self.beta * (ntd * weight).sum(1)
        return losses
