"""``AuxProximalTraining``: local training with UA-PDFL's auxiliary proximal term (papers/ua-pdfl.txt Eq. 12).

``f_m(w_m) = L(w_m; D_m) + mu * ||I_m^Aux - I_avg^Aux||_2^2`` with ``I_m^Aux = g_m(X_unit)`` recomputed from
the current weights at every batch (so the term has a gradient) and ``I_avg^Aux`` the mean auxiliary
representation of the client and its peers, a detached constant of the phase (Algorithm 2, lines 28-33).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import lightning as L
from torch import Tensor, nn

from lit_fl.choices import SupervisedLoss
from lit_fl.losses import at_least_float32
from lit_fl.models.metadata import extract_features
from lit_fl.steps.local_training import LocalTraining
from lit_fl.steps.optim import SGDConfig
from lit_fl.steps.step_loss import count_loss

FeatureFn = Callable[[nn.Module, Tensor], Tensor]


class AuxProximalTraining(LocalTraining):
    """CE (or WSM) on the client's batches plus ``mu * ||g(X_unit) - target||^2`` (squared L2 norm, summed).

    ``g(X_unit)`` runs with the model in eval mode (gradients on): BatchNorm uses its running statistics and
    is not updated by the constant input, dropout is off - the same mode in which the peers computed the
    representations that make up ``target``. The reported loss (``loss_sum``) includes the term.

    Args:
        model: the client's model (trained in place).
        class_proportions: the client's ``beta`` (only used by the WSM loss).
        x_unit: ``X_unit``, shape ``(1, C, H, W)``.
        target: ``I_avg^Aux``, the flattened mean feature vector (detached here).
        mu: weight of the term (UA-PDFL default 0.01); 0 gives plain local training.
        features: ``features(model, x) -> (batch, F)``, the flattened input of the classifier ``h``
            (default :func:`lit_fl.models.metadata.extract_features`).
    """

    def __init__(
        self,
        model: nn.Module,
        class_proportions: Tensor,
        x_unit: Tensor,
        target: Tensor,
        mu: float = 0.01,
        loss: SupervisedLoss = "ce",
        optimizer: SGDConfig | None = None,
        features: FeatureFn = extract_features,
    ) -> None:
        super().__init__(model, class_proportions, loss, optimizer)
        if not mu >= 0:
            raise ValueError(f"mu must be >= 0, got {mu}")
        self.register_buffer("x_unit", at_least_float32(x_unit.detach()), persistent=False)
        self.register_buffer("target", at_least_float32(target.detach()).flatten(), persistent=False)
        self.mu = float(mu)
        self.features = features

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        loss = self.loss_fn(self.model(x), y, self.class_proportions)
        if self.mu > 0:
            loss = loss + self.aux_penalty()
        count_loss(self, loss)
        return loss

    def fusion_key(self) -> Hashable | None:
        """:meth:`LocalTraining.fusion_key`, and the same ``mu``, features and ``X_unit``."""
        key = super().fusion_key()
        if key is None:
            return None
        return (*key, self.mu, self.features, tuple(self.x_unit.flatten().tolist()))

    @classmethod
    def batched(cls, steps: Sequence[AuxProximalTraining], num_batches: Sequence[int]) -> L.LightningModule:
        from lit_fl.steps.batched_local_training import BatchedAuxProximalTraining

        first = steps[0]
        return BatchedAuxProximalTraining([s.model for s in steps], [s.class_proportions for s in steps], num_batches,
                                          first.x_unit, [s.target for s in steps], first.mu, first.features,
                                          first.loss_name, first.optimizer_config)

    def aux_penalty(self) -> Tensor:
        """``mu * ||g(X_unit) - target||^2`` with gradients w.r.t. the model's current weights."""
        was_training = self.model.training
        self.model.eval()
        try:
            aux = at_least_float32(self.features(self.model, self.x_unit)).flatten()
        finally:
            self.model.train(was_training)
        return self.mu * ((aux - self.target) ** 2).sum()
