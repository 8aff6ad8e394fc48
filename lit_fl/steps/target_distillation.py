"""``TargetDistillation``: a model learns fixed per-sample targets on (unlabeled) public inputs: the "digest" or
"distillation" step of federated distillation, on a client or on a server.

The batches are ``(x, t)`` pairs: ``x`` the public inputs, ``t`` the target of each sample (``[B, C]``, computed
before the phase and fixed during it: a constant, only the model is trained). With ``z = model(x)`` the logits and
``T`` the temperature, the loss per batch is ``weight`` times (``i`` a sample; on token sequences a position)

* ``l1``: ``mean_{i,c} |z_ic - t_ic|`` over the batch's samples ``i`` and classes ``c`` (``t`` logits);
* ``mse``: ``mean_{i,c} (z_ic - t_ic)^2`` (``t`` logits);
* ``kl``: ``T^2 / B sum_i KL(p_i || softmax(z_i / T)) = T^2 / B sum_i sum_c p_ic (log p_ic - log softmax(z_i / T)_c)``
  (``0 log 0 = 0``);
* ``ce``: ``T^2 / B sum_i -sum_c p_ic log softmax(z_i / T)_c``, the cross-entropy with soft labels ``p``: the KL up
  to ``p``'s entropy, a constant without gradient (the values differ, the gradients are the same math);

where the soft labels are ``p = t`` (``target="probabilities"``: rows on the simplex, given at the temperature
``T`` already) or ``p = softmax(t / T)`` (``target="logits"``). The ``T^2`` keeps the gradients' scale independent of
``T`` (Hinton et al. 2015). The methods' settings:

* FedMD's digest (Li & Wang 2019, Algorithm 1): ``loss="l1"``, ``target="logits"``: the model without its softmax
  "trained to approach the consensus" (the reference code's Keras ``mean_absolute_error`` on logits); ``mse`` offered;
* DS-FL's distillation, clients and global model (Itahara et al. 2023): ``loss="kl"``, ``target="probabilities"``
  (the ERA soft labels), ``T = 1``;
* KT-pFL's client distillation (Zhang et al. 2021, Algorithm 1): ``loss="kl"``, ``target="probabilities"`` (the
  personalized soft predictions ``t_n``, at ``T``), ``temperature=T``, ``weight=lambda``;
* FDmeta's server KD and client digest (Liu et al. 2022): ``loss="ce"``, ``target="logits"`` (the aggregated
  logits), ``temperature=T``.

On token sequences (:mod:`lit_fl.data.tokens`; ``x`` ``[B, T]``, ``t`` and ``z`` ``[B, T, V]``) every position whose
input token is not PAD is one distillation sample ``i`` (:func:`~lit_fl.steps.distillation.distilled_rows`, as
codistillation distils: unlabeled text says where it ends by its padding), so ``B`` above is the number of such
positions in the batch and the PAD positions' targets are never read.

Every loss is computed in float32 (float64 in a float64 run). The model trains in train mode (BatchNorm on the
batch's statistics, its running statistics updated: the inputs are real data) by SGD with the given settings, a fresh
optimizer per phase. Under ``trainer.fuse on`` the ``ce``-on-logits digests (FDmeta's) of clients with the same
settings and models without BatchNorm run as one step (:class:`BatchedTargetDistillation`), each client on its own
batches of its own targets; the other settings run one client at a time.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import astuple
from typing import Literal

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lit_fl.data.tokens import PAD, is_token_batch
from lit_fl.losses import at_least_float32, flat_positions
from lit_fl.steps.batched import BatchedClientStep, per_sample
from lit_fl.steps.distillation import distilled_rows
from lit_fl.steps.noise_distillation import batched_soft_cross_entropy
from lit_fl.steps.optim import SGDConfig
from lit_fl.steps.step_loss import count_loss, reset_loss_counter

TargetLoss = Literal["l1", "mse", "kl", "ce"]
TARGET_LOSSES: tuple[str, ...] = ("l1", "mse", "kl", "ce")
#: what the batches' targets are: soft labels on the simplex, or logits (the soft labels are ``softmax(t / T)``)
TargetKind = Literal["probabilities", "logits"]
TARGET_KINDS: tuple[str, ...] = ("probabilities", "logits")
#: the losses that compare logits with logit targets directly (no softmax, hence no temperature)
LOGIT_DISTANCES: tuple[str, ...] = ("l1", "mse")


def soft_labels(targets: Tensor, target: TargetKind, temperature: float) -> Tensor:
    """``p``: ``targets`` themselves (``probabilities``) or ``softmax(targets / T)`` (``logits``), in float32 (or
    float64)."""
    t = at_least_float32(targets)
    return t if target == "probabilities" else F.softmax(t / temperature, dim=1)


def target_loss(
    logits: Tensor, targets: Tensor, loss: TargetLoss, target: TargetKind = "logits", temperature: float = 1.0,
    x: Tensor | None = None,
) -> Tensor:
    """The loss of ``logits`` against fixed ``targets`` (see the module docstring; without ``weight``), in float32
    (float64 in a float64 run). With the inputs ``x`` of a token batch, over the positions whose input is not PAD."""
    if x is not None:
        logits, targets = distilled_rows(logits, x), distilled_rows(targets, x)
    z = at_least_float32(logits)
    if loss == "l1":
        return (z - at_least_float32(targets)).abs().mean()
    if loss == "mse":
        return (z - at_least_float32(targets)).pow(2).mean()
    t = float(temperature)
    p = soft_labels(targets, target, t)
    log_q = F.log_softmax(z / t, dim=1)
    if loss == "kl":
        return F.kl_div(log_q, p, reduction="batchmean") * (t * t)
    if loss == "ce":
        return -(p * log_q).sum(dim=1).mean() * (t * t)
    raise ValueError(f"target loss must be one of {', '.join(TARGET_LOSSES)}, got {loss!r}")


def check_target_settings(loss: str, target: str, temperature: float, weight: float) -> None:
    """Refuse settings that name no loss of the module docstring (a bug in the calling method: ValueError)."""
    if loss not in TARGET_LOSSES:
        raise ValueError(f"loss must be one of {', '.join(TARGET_LOSSES)}, got {loss!r}")
    if target not in TARGET_KINDS:
        raise ValueError(f"target must be one of {', '.join(TARGET_KINDS)}, got {target!r}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if weight < 0:
        raise ValueError(f"weight must be >= 0, got {weight}")
    if loss in LOGIT_DISTANCES and (target != "logits" or temperature != 1.0):
        raise ValueError(f"loss {loss!r} compares logits with logits: target must be 'logits' and temperature 1, "
                         f"got {target!r} and {temperature}")


class TargetDistillation(L.LightningModule):
    """``model`` trained by SGD (``optimizer``) on ``weight *`` :func:`target_loss` over ``(x, targets)`` batches.

    Args:
        model: the model trained (in place).
        loss: ``l1``, ``mse`` (logits against logit targets), ``kl`` or ``ce`` (against soft labels).
        target: what the batches' targets are: ``probabilities`` (soft labels at ``temperature``) or ``logits``.
        temperature: ``T`` of the softmaxes of ``kl`` and ``ce`` (loss times ``T^2``); 1 for ``l1``/``mse``.
        weight: the loss weight (KT-pFL's ``lambda``, ``algorithm.kl_weight``).
        optimizer: its SGD settings.
    """

    def __init__(
        self,
        model: nn.Module,
        loss: TargetLoss,
        target: TargetKind,
        temperature: float = 1.0,
        weight: float = 1.0,
        optimizer: SGDConfig | None = None,
    ) -> None:
        super().__init__()
        check_target_settings(loss, target, temperature, weight)
        self.model = model
        self.loss_name: TargetLoss = loss
        self.target: TargetKind = target
        self.temperature = float(temperature)
        self.weight = float(weight)
        self.optimizer_config = optimizer or SGDConfig()
        reset_loss_counter(self)

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, targets = batch
        loss = self.weight * target_loss(self.model(x), targets, self.loss_name, self.target, self.temperature, x)
        count_loss(self, loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.optimizer_config.build(self.model.parameters())

    # -- fusion (the client-work contract, :func:`lit_fl.steps.phase.run_phase`) ----------------------------

    def fusion_key(self) -> Hashable | None:
        """``ce`` on logit targets (FDmeta's digest) with the same SGD settings, temperature and weight fuse
        (:meth:`batched`); None for the other settings, a model with BatchNorm (padding would change its batch
        statistics) or random draws."""
        from lit_fl.steps.fusion import fusible

        if (self.loss_name, self.target) != ("ce", "logits") or not (per_sample(self.model) and fusible(self.model)):
            return None
        return (type(self), astuple(self.optimizer_config), self.temperature, self.weight)

    @classmethod
    def batched(cls, steps: Sequence[TargetDistillation], num_batches: Sequence[int]) -> L.LightningModule:
        return BatchedTargetDistillation(steps, num_batches)


class BatchedTargetDistillation(BatchedClientStep):
    """G clients' ``ce``-on-logits :class:`TargetDistillation` as one step: one slot of the G students (any
    architectures), every client's loss ``weight *`` :func:`~lit_fl.steps.noise_distillation.batched_soft_cross_entropy`
    of its own batch's target logits (the stacked ``y``, ``[G, B, C]``) and its own student's logits."""

    def __init__(self, steps: Sequence[TargetDistillation], num_batches: Sequence[int]) -> None:
        first = steps[0]
        super().__init__([[s.model for s in steps]], [True], [first.optimizer_config], num_batches)
        self.temperature, self.weight = first.temperature, first.weight

    def client_losses(self, x: Tensor, y: Tensor, weight: Tensor) -> Tensor:
        logits = self.slot_logits(0, x)
        if is_token_batch(x.flatten(0, 1)):  # every client's mean over its batch's positions whose input is not PAD
            y, logits, weight = flat_positions(y, 1), flat_positions(logits, 1), input_token_weights(x, weight)
        return self.weight * batched_soft_cross_entropy(y, logits, weight, self.temperature)


def input_token_weights(x: Tensor, weight: Tensor) -> Tensor:
    """Per-client token batches as rows: inputs ``x`` ``[G, B, T]`` and the per-sample weights ``[G, B]`` of
    :class:`~lit_fl.data.batches.StackedBatches` become weights ``[G, B*T]``, ``1 / m_g`` on the ``m_g`` positions of
    client g's real samples whose input is not PAD and 0 elsewhere (a weighted sum is every client's mean over them)."""
    mask = ((x != PAD) & (weight > 0).unsqueeze(-1)).to(weight.dtype)
    per_token = mask / mask.sum(dim=(1, 2), keepdim=True).clamp_min(1.0)
    return per_token.reshape(x.shape[0], -1)
