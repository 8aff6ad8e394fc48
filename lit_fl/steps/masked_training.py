"""``MaskedTraining``: local training of a sparse model (DisPFL, Dai et al. ICML 2022): the weights outside the
client's mask are zero before every step and stay exactly zero after it; and its fused form for G clients at once
(:class:`BatchedMaskedTraining`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import lightning as L
import torch
from torch import Tensor, nn

from lit_fl.choices import SupervisedLoss
from lit_fl.steps.batched_local_training import BatchedLocalTraining
from lit_fl.steps.local_training import LocalTraining
from lit_fl.steps.optim import SGDConfig


class MaskedSGD(torch.optim.SGD):
    """SGD on ``params`` under fixed 0/1 ``masks`` (one per parameter, same shape): every step zeroes the masked
    gradients, steps as :class:`torch.optim.SGD` does, then multiplies every parameter by its mask. Weight decay and
    the momentum buffer therefore never act on a masked weight, and a masked weight is exactly zero after the step
    (the reference code's ``param.data *= mask`` after ``optimizer.step()``). The masks are cast once to their
    parameters' dtype and device, and each multiplication is one multi-tensor (``foreach``) call for all
    parameters (a gradient has its parameter's dtype)."""

    def __init__(self, params: Iterable[nn.Parameter], masks: Sequence[Tensor], **kwargs: float | bool) -> None:
        params = list(params)
        if len(params) != len(masks):
            raise ValueError(f"MaskedSGD: {len(params)} parameters, {len(masks)} masks")
        super().__init__(params, **kwargs)
        self.masks = [m.to(device=p.device, dtype=p.dtype) for p, m in zip(params, masks)]

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201 - torch.optim.Optimizer.step's signature
        params = [p for group in self.param_groups for p in group["params"]]
        pairs = [(p.grad, m) for p, m in zip(params, self.masks) if p.grad is not None]
        if pairs:
            torch._foreach_mul_([g for g, _ in pairs], [m for _, m in pairs])
        loss = super().step(closure)
        torch._foreach_mul_(params, self.masks)
        return loss


class MaskedTraining(LocalTraining):
    """:class:`LocalTraining` (CE or WSM) of a sparse model: ``masks`` (0/1 or bool, one per parameter of
    ``model`` in ``model.parameters()`` order) are applied to the weights at construction and enforced by
    :class:`MaskedSGD` at every optimizer step. The runner has no hook after ``optimizer.step()``, so the mask
    lives in the optimizer. Steps with equal :meth:`LocalTraining.fusion_key` (same loss and SGD settings, no
    BatchNorm, no random draws) fuse (:meth:`batched`), each client under its own masks."""

    def __init__(
        self,
        model: nn.Module,
        class_proportions: Tensor,
        masks: Sequence[Tensor],
        loss: SupervisedLoss = "ce",
        optimizer: SGDConfig | None = None,
    ) -> None:
        super().__init__(model, class_proportions, loss, optimizer)
        params = list(model.parameters())
        if [tuple(m.shape) for m in masks] != [tuple(p.shape) for p in params]:
            raise ValueError("MaskedTraining: the masks must have the model's parameter shapes")
        for i, m in enumerate(masks):  # buffers: moved with the step to the runner's device
            self.register_buffer(f"mask_{i}", m.detach().to(torch.bool).clone(), persistent=False)
        self.num_masks = len(params)
        with torch.no_grad():
            for p, m in zip(params, self.masks()):
                p.mul_(m.to(device=p.device, dtype=p.dtype))

    def masks(self) -> list[Tensor]:
        return [getattr(self, f"mask_{i}") for i in range(self.num_masks)]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        config = self.optimizer_config
        return MaskedSGD(self.model.parameters(), self.masks(), lr=config.lr, momentum=config.momentum,
                         weight_decay=config.weight_decay, foreach=True)

    @classmethod
    def batched(cls, steps: Sequence[MaskedTraining], num_batches: Sequence[int]) -> L.LightningModule:
        """G steps with equal :meth:`fusion_key` as one :class:`BatchedMaskedTraining`."""
        return BatchedMaskedTraining(steps, num_batches)


class BatchedMaskedTraining(BatchedLocalTraining):
    """G clients' :class:`MaskedTraining` as one step: :class:`BatchedLocalTraining`'s losses, and one
    :class:`MaskedSGD` over the stacked weights whose mask of stacked parameter ``[G_a, *shape]`` is the stack of
    the G_a clients' own masks: every model's gradient is masked by its own client's mask before the step and its
    weights after it, as alone (the stacked weights start masked: each client's model was masked when its step was
    built)."""

    def __init__(self, steps: Sequence[MaskedTraining], num_batches: Sequence[int]) -> None:
        first = steps[0]
        super().__init__([s.model for s in steps], [s.class_proportions for s in steps], num_batches,
                         first.loss_name, first.optimizer_config)
        self.register_stacked("mask", [s.masks() for s in steps])

    def masks(self) -> list[Tensor]:
        """The stacked masks, one per stacked parameter of :attr:`slot` (in ``slot.parameters()`` order)."""
        return self.stacked("mask")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        config = self.slot_optimizers[0]
        return MaskedSGD(self.slot.parameters(), self.masks(), lr=config.lr, momentum=config.momentum,
                         weight_decay=config.weight_decay, foreach=True)
