"""``DeepMutualLearning``: two models teach each other on one client's data (Zhang et al. 2018, DML).

Used by Def-KT's model fusion (papers/def-kt.txt, Algorithm 1, Eq. 2-8) and meant for FedORION's client
step (local model <-> copy of the global model) as well.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import astuple

import lightning as L
import torch
from torch import Tensor, nn

from lit_fl.choices import SupervisedLoss
from lit_fl.losses import batched_peer_losses, peer_losses
from lit_fl.steps.batched import BatchedClientStep, per_sample
from lit_fl.steps.optim import SGDConfig
from lit_fl.steps.peer_learning import PeerLearningStep


class DeepMutualLearning(PeerLearningStep):
    """Every batch: the logits ``z_a``, ``z_b`` of BOTH models first, then (Def-KT Eq. 5-6)

    ``L_a = sup(z_a, y) + kl_weight * KL(p_b || p_a)`` and ``L_b = sup(z_b, y) + kl_weight * KL(p_a || p_b)``

    with the peer's prediction detached, so both updates (Def-KT Eq. 2 and 3) use the predictions computed
    before either model moved. ``L_a`` depends on ``W_a`` alone and ``L_b`` on ``W_b`` alone, so one backward
    pass of ``L_a + L_b`` gives each model exactly the gradient of its own loss, and one SGD over both models'
    parameters equals one SGD per model (SGD, momentum and weight decay are all per parameter).

    Args:
        model_a: first model (Def-KT: the received model ``w~``, which the receiver keeps).
        model_b: second model (Def-KT: the receiver's own model ``w``).
        class_proportions: ``beta`` of the client whose data is used (for ``loss="wsm"``).
        loss: supervised term, ``ce`` (the Def-KT paper, Eq. 7) or ``wsm`` (DFML Eq. 2; the DFML paper's
            comparison with Def-KT).
        kl_weight: weight of the KL term (Def-KT: 1).
        temperature: distillation temperature of the KL term (scaled by ``T^2``; Def-KT: 1).
        trainable: ``(a, b)``; a model flagged False is a fixed teacher: its logits are computed without
            gradient, its loss is not added and the optimizer does not hold its parameters.
        optimizer: SGD settings (a fresh optimizer per phase).
        loss_weights: ``(supervised, kl)`` weight per model; default ``(1, kl_weight)`` for both. FML (Shen et
            al.) uses ``(alpha, 1 - alpha)`` for the local model and ``(beta, 1 - beta)`` for the meme.
        model_optimizers: SGD settings per model (None = ``optimizer``); FedORION trains the global copy at
            ``eta_g`` and the local model at ``eta_i`` (its Algorithm 1).
    """

    def __init__(
        self,
        model_a: nn.Module,
        model_b: nn.Module,
        class_proportions: Tensor,
        loss: SupervisedLoss = "ce",
        kl_weight: float = 1.0,
        temperature: float = 1.0,
        trainable: Sequence[bool] = (True, True),
        optimizer: SGDConfig | None = None,
        loss_weights: Sequence[tuple[float, float]] | None = None,
        model_optimizers: Sequence[SGDConfig | None] | None = None,
    ) -> None:
        if kl_weight < 0:
            raise ValueError(f"kl_weight must be >= 0, got {kl_weight}")
        weights = [(1.0, kl_weight)] * 2 if loss_weights is None else [(float(a), float(b)) for a, b in loss_weights]
        if len(weights) != 2 or any(a < 0 or b < 0 for a, b in weights):
            raise ValueError(f"loss_weights must give two (supervised, kl) pairs >= 0, got {loss_weights}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if len(trainable) != 2 or not any(trainable):
            raise ValueError(f"trainable must give two flags, at least one True; got {tuple(trainable)}")
        super().__init__([model_a, model_b], class_proportions, trainable, loss, optimizer, model_optimizers)
        self.kl_weight = float(kl_weight)
        self.loss_weights = weights
        self.register_buffer("peer_matrix", torch.tensor([[0.0, 1.0], [1.0, 0.0]]), persistent=False)
        self.register_buffer("supervised_weights", torch.tensor([a for a, _ in weights]), persistent=False)
        self.register_buffer("distill_weights", torch.tensor([b for _, b in weights]), persistent=False)
        self.temperature = float(temperature)

    @property
    def model_a(self) -> nn.Module:
        return self.models[0]

    @property
    def model_b(self) -> nn.Module:
        return self.models[1]

    def peer_losses(self, logits: Tensor, y: Tensor) -> Tensor:
        """Def-KT Eq. 5 (model a) and Eq. 6 (model b) given both models' stacked logits ``[2, B, C]``:
        ``w_sup * sup(z_n, y) + w_kl * KL(p_peer || p_n)`` with ``(w_sup, w_kl) = loss_weights[n]``."""
        if all(w_kl == 0.0 for _, w_kl in self.loss_weights):
            return peer_losses(logits, y, None, self.supervised_weights, class_proportions=self.class_proportions,
                               loss=self.loss_name)
        return peer_losses(logits, y, self.peer_matrix, self.supervised_weights, self.distill_weights,
                           self.temperature, self.class_proportions, self.loss_name)

    # -- fusion (the client-work contract, :func:`lit_fl.steps.phase.run_phase`) ----------------------------

    def fusion_key(self) -> Hashable | None:
        """Steps with equal keys fuse (:meth:`batched`): the same losses and SGD settings, any architectures
        (FedORION's clients and their copies of the global model, FML's models and memes, Def-KT's pairs). None
        where a learner has BatchNorm or draws random numbers."""
        from lit_fl.steps.fusion import fusible

        if not all(per_sample(m) and fusible(m) for m, t in zip(self.models, self.trainable) if t):
            return None
        optimizers = tuple(None if o is None else astuple(o) for o in self.model_optimizers)
        return (type(self), tuple(self.trainable), self.loss_name, tuple(self.loss_weights), self.temperature,
                astuple(self.optimizer_config), optimizers)

    @classmethod
    def batched(cls, steps: Sequence[DeepMutualLearning], num_batches: Sequence[int]) -> L.LightningModule:
        return BatchedDeepMutualLearning(steps, num_batches)

    def client_peer_losses(self, logits: Tensor, y: Tensor, weight: Tensor, class_proportions: Tensor) -> Tensor:
        """Eq. 5-6 of G clients at once, each on its own batch: ``[G, 2]`` from ``[2, G, B, C]``
        (:func:`~lit_fl.losses.batched_peer_losses`)."""
        distills = None if all(w_kl == 0.0 for _, w_kl in self.loss_weights) else self.peer_matrix
        return batched_peer_losses(logits, y, weight, distills, self.supervised_weights, self.distill_weights,
                                   self.temperature, class_proportions, self.loss_name)


class BatchedDeepMutualLearning(BatchedClientStep):
    """G clients' :class:`DeepMutualLearning` (each pair on its own client's batches) as one step: slot 0 holds
    the G first models, slot 1 the G second ones, each slot with its own SGD settings (FedORION trains the global
    copy at ``eta_g``)."""

    def __init__(self, steps: Sequence[DeepMutualLearning], num_batches: Sequence[int]) -> None:
        first = steps[0]
        optimizers = [own or first.optimizer_config for own in first.model_optimizers]
        super().__init__([[s.models[n] for s in steps] for n in range(2)], first.trainable, optimizers, num_batches)
        self.register_buffer("class_proportions", torch.stack([s.class_proportions for s in steps]),
                             persistent=False)
        self.__dict__["template"] = first  # its loss settings (not a submodule: its models are slots here)
        learners = [n for n, t in enumerate(first.trainable) if t]
        self.register_buffer("learner_index", torch.tensor(learners), persistent=False)

    def client_losses(self, x: Tensor, y: Tensor, weight: Tensor) -> Tensor:
        logits = torch.stack([self.slot_logits(n, x) for n in range(2)])
        losses = self.__dict__["template"].client_peer_losses(logits, y, weight, self.class_proportions)
        return losses.index_select(1, self.learner_index).sum(1)

    @contextmanager
    def fused(self) -> Iterator[None]:
        template: DeepMutualLearning = self.__dict__["template"]
        for name in ("peer_matrix", "supervised_weights", "distill_weights"):  # the loss's constants, on the device
            setattr(template, name, getattr(template, name).to(self.active.device))
        with super().fused():
            yield
