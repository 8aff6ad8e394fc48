"""``MaskedTraining``: local training of a sparse model (DisPFL, Dai et al. ICML 2022): the weights outside the
client's mask are zero before every step and stay exactly zero after it."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

import lightning as L
import torch
from torch import Tensor, nn

from lit_fl.choices import SupervisedLoss
from lit_fl.steps.local_training import LocalTraining
from lit_fl.steps.optim import SGDConfig


class MaskedSGD(torch.optim.SGD):
    """SGD on ``params`` under fixed 0/1 ``masks`` (one per parameter, same shape): every step zeroes the masked
    gradients, steps as :class:`torch.optim.SGD` does, then multiplies every parameter by its mask. Weight decay and
    the momentum buffer therefore never act on a masked weight, and a masked weight is exactly zero after the step
    (the reference code's ``param.data *= mask`` after ``optimizer.step()``)."""

    def __init__(self, params: Iterable[nn.Parameter], masks: Sequence[Tensor], **kwargs: float | bool) -> None:
        params = list(params)
        if len(params) != len(masks):
            raise ValueError(f"MaskedSGD: {len(params)} parameters, {len(masks)} masks")
        super().__init__(params, **kwargs)
        self.masks = list(masks)

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201 - torch.optim.Optimizer.step's signature
        params = [p for group in self.param_groups for p in group["params"]]
        for p, m in zip(params, self.masks):
            if p.grad is not None:
                p.grad.mul_(m.to(p.grad.dtype))
        loss = super().step(closure)
        for p, m in zip(params, self.masks):
            p.mul_(m.to(p.dtype))
        return loss


class MaskedTraining(LocalTraining):
    """:class:`LocalTraining` (CE or WSM) of a sparse model: ``masks`` (0/1 or bool, one per parameter of
    ``model`` in ``model.parameters()`` order) are applied to the weights at construction and enforced by
    :class:`MaskedSGD` at every optimizer step. The runner has no hook after ``optimizer.step()``, so the mask
    lives in the optimizer. It never fuses (:meth:`fusion_key` is None): the phase runner runs it one client at a
    time, still placed and broadcast."""

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

    def fusion_key(self) -> Hashable | None:
        return None

    @classmethod
    def batched(cls, steps: Sequence[LocalTraining], num_batches: Sequence[int]) -> L.LightningModule:
        raise NotImplementedError("MaskedTraining never fuses (fusion_key is None)")
