"""``BatchedLocalTraining``: G clients' :class:`LocalTraining` (and UA-PDFL's :class:`AuxProximalTraining`) as one
fused step (:class:`~lit_fl.steps.batched.BatchedClientStep`): each client on its own batches, in the order it draws
alone, every model's update the one it makes alone within float32 rounding."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from lit_fl.choices import SupervisedLoss
from lit_fl.losses import at_least_float32, batched_supervised_losses
from lit_fl.steps.batched import BatchedClientStep, FusedSlot, per_sample
from lit_fl.steps.dp_sgd import client_data_losses
from lit_fl.steps.optim import SGDConfig

__all__ = ["BatchedAuxProximalTraining", "BatchedLocalTraining", "per_sample"]


class BatchedLocalTraining(BatchedClientStep):
    """:class:`LocalTraining` (WSM with each client's own ``beta``, or CE; FedProx's ``prox_mu``) of G same-
    architecture models at once; :meth:`mean_losses` reads every model's mean batch loss."""

    def __init__(
        self,
        models: Sequence[nn.Module],
        class_proportions: Sequence[Tensor],
        num_batches: Sequence[int],
        loss: SupervisedLoss = "wsm",
        optimizer: SGDConfig | None = None,
        prox_mu: float = 0.0,
    ) -> None:
        super().__init__([models], [True], [optimizer or SGDConfig()], num_batches)
        self.register_buffer("class_proportions", torch.stack([b.float() for b in class_proportions]),
                             persistent=False)
        self.loss_name: SupervisedLoss = loss
        self.prox_mu = prox_mu
        self.start_weights = [[p.detach().clone() for p in group.params] for group in self.slot.groups
                              ] if prox_mu > 0 else []
        #: how many buffers :meth:`register_stacked` registered under each name
        self.stacked_counts: dict[str, int] = {}

    @property
    def slot(self) -> FusedSlot:
        """The one slot: every client's model."""
        return self.slots[0]

    def register_stacked(self, name: str, per_model: Sequence[Sequence[Tensor]]) -> None:
        """Buffers ``name_0, name_1, ...``, one per stacked parameter of :attr:`slot` (in ``slot.parameters()``
        order): the stack of each member model's own tensor for that parameter (``per_model[g][k]``: model ``g``'s
        tensor for its ``k``-th parameter, e.g. its DisPFL mask or its SCAFFOLD correction). Not persistent; they
        move with the step to the runner's device."""
        count = 0
        for rows, group in zip(self.slot.members, self.slot.groups):
            for k in range(len(group.params)):
                self.register_buffer(f"{name}_{count}", torch.stack([per_model[g][k] for g in rows]), persistent=False)
                count += 1
        self.stacked_counts[name] = count

    def stacked(self, name: str) -> list[Tensor]:
        """The buffers :meth:`register_stacked` registered under ``name``, in ``slot.parameters()`` order."""
        return [getattr(self, f"{name}_{i}") for i in range(self.stacked_counts[name])]

    def data_loss(self, x: Tensor, y: Tensor, weight: Tensor) -> Tensor:
        """Every client's batch mean of the supervised loss ``[G]``: the term that reads the clients' data (DP-SGD
        clips its per-sample gradients, :mod:`lit_fl.steps.dp_sgd`)."""
        return batched_supervised_losses(self.slot_logits(0, x), y, weight, self.class_proportions, self.loss_name)

    def client_losses(self, x: Tensor, y: Tensor, weight: Tensor) -> Tensor:
        losses = client_data_losses(self, x, y, weight, self._step)
        if self.prox_mu > 0:
            losses = losses + 0.5 * self.prox_mu * self._proximal()
        return losses

    def _proximal(self) -> Tensor:
        """``||W_g - W_g_start||^2`` of every model, ``[G]``."""
        return self.slot.per_client([sum(((p - p0) ** 2).flatten(1).sum(1) for p, p0 in zip(group.params, start))
                                     for group, start in zip(self.slot.groups, self.start_weights)])


class BatchedAuxProximalTraining(BatchedLocalTraining):
    """UA-PDFL Eq. 12 for G clients: CE (or WSM) plus ``mu * ||g_m(X_unit) - I_avg,m||^2``, with every client's own
    target ``I_avg,m`` and ``g_m(X_unit)`` recomputed from its current weights in eval mode at every batch (as
    :class:`AuxProximalTraining` does one client at a time)."""

    def __init__(
        self,
        models: Sequence[nn.Module],
        class_proportions: Sequence[Tensor],
        num_batches: Sequence[int],
        x_unit: Tensor,
        targets: Sequence[Tensor],
        mu: float,
        features: Callable[[nn.Module, Tensor], Tensor],
        loss: SupervisedLoss = "ce",
        optimizer: SGDConfig | None = None,
    ) -> None:
        super().__init__(models, class_proportions, num_batches, loss, optimizer)
        self.register_buffer("x_unit", at_least_float32(x_unit.detach()), persistent=False)
        for i, rows in enumerate(self.slot.members):  # per architecture: its clients' targets
            self.register_buffer(f"targets_{i}", torch.stack([at_least_float32(targets[g].detach()).flatten()
                                                              for g in rows]), persistent=False)
        self.mu = float(mu)
        self.features = features

    def client_losses(self, x: Tensor, y: Tensor, weight: Tensor) -> Tensor:
        losses = super().client_losses(x, y, weight)
        if self.mu > 0:
            losses = losses + self.aux_penalties()
        return losses

    def aux_penalties(self) -> Tensor:
        """``mu * ||g_m(X_unit) - target_m||^2`` of every client ``[G]``, with gradients w.r.t. its weights."""
        penalties = []
        for i, group in enumerate(self.slot.groups):
            aux = at_least_float32(group.apply_in_eval(self.features, self.x_unit)).flatten(1)
            penalties.append(((aux - getattr(self, f"targets_{i}")) ** 2).sum(1))
        return self.mu * self.slot.per_client(penalties)
