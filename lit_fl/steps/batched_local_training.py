"""``BatchedLocalTraining``: G clients of one architecture run :class:`LocalTraining` as one fused phase.

Each client trains on its own batches in its own order (:class:`~lit_fl.data.batches.StackedBatches`: step ``t``
is every client's ``t``-th batch, padded), through one fused module (:class:`~lit_fl.steps.fusion.FusedModels`
with per-model inputs) and one SGD over the stacked weights. Every model's loss depends on its own weights and
its own samples alone, so one backward gives each model exactly its own gradient and the SGD over the stack is
one SGD per model: the update of every model is the one :class:`LocalTraining` makes, within float32 rounding.

Clients with fewer batches stop early: from the step after its last batch a client's loss is 0 (no gradient),
its stacked row is copied back into its module, and what momentum and weight decay later do to that row is never
read. Only models whose training output for a sample depends on that sample alone can be batched this way
(padding must not change any statistic): no BatchNorm in training mode (:func:`per_sample`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import lightning as L
import torch
from torch import Tensor, nn

from lit_fl.choices import SupervisedLoss
from lit_fl.losses import batched_supervised_losses
from lit_fl.steps.fusion import FusedModels, native_cpu_convolutions
from lit_fl.steps.optim import SGDConfig


def per_sample(model: nn.Module) -> bool:
    """Whether each sample's training-mode output depends on that sample alone: no batch normalisation."""
    return not any(isinstance(m, nn.modules.batchnorm._BatchNorm) or "batchnorm" in type(m).__name__.lower()
                   for m in model.modules())


class BatchedLocalTraining(L.LightningModule):
    """:class:`LocalTraining` (WSM with each client's own ``beta``, or CE; FedProx's ``prox_mu``) of G same-
    architecture models at once. Batches are :class:`~lit_fl.data.batches.StackedBatches` ``(x, y, weight)``;
    ``num_batches[g]`` is how many of them model g trains on. The phase runs inside :meth:`fused`, which gives every
    model its weights back; :meth:`mean_losses` then reads every model's mean batch loss."""

    def __init__(
        self,
        models: Sequence[nn.Module],
        class_proportions: Sequence[Tensor],
        num_batches: Sequence[int],
        loss: SupervisedLoss = "wsm",
        optimizer: SGDConfig | None = None,
        prox_mu: float = 0.0,
    ) -> None:
        super().__init__()
        self.group = FusedModels(models)
        self.register_buffer("class_proportions", torch.stack([b.float() for b in class_proportions]),
                             persistent=False)
        self.num_batches_of = list(num_batches)
        steps = torch.arange(max(self.num_batches_of)).unsqueeze(1)
        #: ``[T, G]``: whether model g trains at step t
        self.register_buffer("active", steps < torch.tensor(self.num_batches_of), persistent=False)
        self.loss_name: SupervisedLoss = loss
        self.optimizer_config = optimizer or SGDConfig()
        self.prox_mu = prox_mu
        self.start_weights = [p.detach().clone() for p in self.group.params] if prox_mu > 0 else []
        self.loss_sums = torch.zeros(len(models))
        self._written: list[int] = []

    def training_step(self, batch: tuple[Tensor, Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y, weight = batch
        self._write_back_finished(batch_idx)
        losses = batched_supervised_losses(self.group(x, per_model=True), y, weight, self.class_proportions,
                                           self.loss_name)
        if self.prox_mu > 0:
            losses = losses + 0.5 * self.prox_mu * self._proximal()
        losses = torch.where(self.active[batch_idx], losses, 0.0)
        self.loss_sums = self.loss_sums.to(losses.device) + losses.detach()
        return losses.sum()

    def _proximal(self) -> Tensor:
        """``||W_g - W_g_start||^2`` of every model, ``[G]``."""
        return sum(((p - p0) ** 2).flatten(1).sum(1) for p, p0 in zip(self.group.params, self.start_weights))

    def _write_back_finished(self, step: int) -> None:
        """Copy back the models whose last batch was the previous step (their rows are final)."""
        done = [g for g, n in enumerate(self.num_batches_of) if n == step]
        if done:
            self.group.write_back(done)
            self._written += done

    @contextmanager
    def fused(self) -> Iterator[None]:
        """The phase (:meth:`StepRunner.fit` runs it inside this block): PyTorch's own convolutions on a CPU (as
        every fused phase, see :func:`~lit_fl.steps.fusion.native_cpu_convolutions`); on exit every model not
        copied back yet gets its trained weights."""
        try:
            with native_cpu_convolutions(self.class_proportions.device):
                yield
        finally:
            rest = [g for g in range(len(self.num_batches_of)) if g not in set(self._written)]
            self.group.write_back(rest)
            self._written += rest

    def mean_losses(self) -> list[float]:
        """Every model's mean batch loss (one read from the device)."""
        sums = self.loss_sums.tolist()
        return [s / max(n, 1) for s, n in zip(sums, self.num_batches_of)]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.optimizer_config.build(self.group.parameters())
