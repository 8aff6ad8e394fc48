"""``LocalTraining``: one client trains its model on its own train split (DFML Algorithm 1, client side)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import astuple

import lightning as L
import torch
from torch import Tensor, nn

from lit_fl.choices import SupervisedLoss
from lit_fl.losses import LOSSES
from lit_fl.steps.dp_sgd import data_loss
from lit_fl.steps.optim import SGDConfig
from lit_fl.steps.step_loss import count_loss, reset_loss_counter


class LocalTraining(L.LightningModule):
    """WSM (DFML Eq. 2, with the client's own ``beta``) or CE on the client's batches.

    ``prox_mu > 0`` adds FedProx's ``mu/2 ||W - W_start||^2`` with ``W_start`` the weights at construction.
    """

    def __init__(
        self,
        model: nn.Module,
        class_proportions: Tensor,
        loss: SupervisedLoss = "wsm",
        optimizer: SGDConfig | None = None,
        prox_mu: float = 0.0,
    ) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("class_proportions", class_proportions.float(), persistent=False)
        self.loss_fn = LOSSES[loss]
        self.loss_name: SupervisedLoss = loss
        self.optimizer_config = optimizer or SGDConfig()
        self.prox_mu = prox_mu
        self.start_weights = [p.detach().clone() for p in model.parameters()] if prox_mu > 0 else []
        reset_loss_counter(self)

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)

    def data_loss(self, x: Tensor, y: Tensor) -> Tensor:
        """The batch mean of the supervised loss: the term that reads the client's data (DP-SGD clips its per-sample
        gradients, :mod:`lit_fl.steps.dp_sgd`)."""
        return self.loss_fn(self.model(x), y, self.class_proportions)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        loss = data_loss(self, x, y, batch_idx)
        if self.prox_mu > 0:
            loss = loss + 0.5 * self.prox_mu * self._proximal()
        count_loss(self, loss)
        return loss

    def _proximal(self) -> Tensor:
        return sum(((p - p0) ** 2).sum() for p, p0 in zip(self.model.parameters(), self.start_weights))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.optimizer_config.build(self.model.parameters())

    # -- fusion (the client-work contract, :func:`lit_fl.steps.phase.run_phase`) ----------------------------

    def fusion_key(self) -> Hashable | None:
        """Steps of the same kind with equal keys fuse into one :meth:`batched` step: same loss and optimizer settings,
        any architectures (each architecture's models run as one fused module). None: this step never fuses, e.g. a
        BatchNorm model, whose batch statistics padding would change, or a model drawing random numbers."""
        from lit_fl.steps.batched import per_sample
        from lit_fl.steps.fusion import fusible

        if not (per_sample(self.model) and fusible(self.model)):
            return None
        return (type(self), self.loss_name, astuple(self.optimizer_config), self.prox_mu)

    @classmethod
    def batched(cls, steps: Sequence[LocalTraining], num_batches: Sequence[int]) -> L.LightningModule:
        """G steps with equal :meth:`fusion_key` as one fused step over their stacked batches."""
        from lit_fl.steps.batched_local_training import BatchedLocalTraining

        first = steps[0]
        return BatchedLocalTraining([s.model for s in steps], [s.class_proportions for s in steps], num_batches,
                                    first.loss_name, first.optimizer_config, first.prox_mu)
