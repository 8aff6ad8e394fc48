"""``GradientWork``: the gradient of a client's supervised loss on one batch at its model's current weights, as a
value (DisPFL's screening for mask regrowth), run by the phase runner like a predict work
(:func:`~lit_fl.steps.predict.run_value_phase`: placed, fused per architecture, broadcast).

The model runs in eval mode (BatchNorm on its running statistics, no dropout; DisPFL's reference screens so) and is
not changed. Fused (``trainer.fuse``), the works of one architecture and batch shape run as one
:class:`~lit_fl.steps.fusion.FusedModels` on their own batches: every client's loss depends on its own weights alone,
so one backward pass of the sum gives every model exactly its own gradient (within float rounding of the unfused
one).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from lit_fl.choices import SupervisedLoss
from lit_fl.steps.predict import eval_mode

if TYPE_CHECKING:
    from lit_fl.steps.runner import StepRunner


@dataclass(frozen=True)
class GradientWork:
    """Client ``client``'s gradient of ``loss`` (``ce`` or ``wsm`` with its ``class_proportions``) on the batch
    ``(x, y)`` with respect to every parameter of ``model``; the value is one tensor per parameter, in
    ``named_parameters`` order."""

    client: int
    model: nn.Module
    x: Tensor
    y: Tensor
    class_proportions: Tensor
    loss: SupervisedLoss = "ce"

    def fusion_kind(self) -> Hashable:
        """Works fuse when their models share an architecture, their loss is one and their batches one shape."""
        from lit_fl.steps.fusion import signature

        return ("gradient", signature(self.model), self.loss, tuple(self.x.shape), tuple(self.y.shape), self.x.dtype)

    @classmethod
    def compute(cls, runner: StepRunner, works: Sequence[GradientWork], fused: bool) -> list[tuple[Tensor, ...]]:
        if not fused or len(works) == 1:  # one model: stacking it would only add kernels
            return [work.gradient_alone(runner) for work in works]
        return gradients_fused(runner, works)

    def gradient_alone(self, runner: StepRunner) -> tuple[Tensor, ...]:
        """This work's gradient, the model alone."""
        from lit_fl.losses import LOSSES

        device = runner.device
        params = [p for _, p in self.model.named_parameters()]
        with eval_mode(self.model), torch.enable_grad(), runner.autocast():
            logits = self.model(self.x.to(device))
            loss = LOSSES[self.loss](logits, self.y.to(device), self.class_proportions.float().to(device))
            grads = torch.autograd.grad(loss, params)
        return tuple(g.detach() for g in grads)


def gradients_fused(runner: StepRunner, works: Sequence[GradientWork]) -> list[tuple[Tensor, ...]]:
    """The gradients of works of one kind as one :class:`~lit_fl.steps.fusion.FusedModels` on their own batches."""
    from lit_fl.losses import batched_supervised_losses
    from lit_fl.steps.fusion import FusedModels, native_cpu_convolutions

    device = runner.device
    group = FusedModels([work.model for work in works]).eval()
    x = torch.stack([work.x for work in works]).to(device)
    y = torch.stack([work.y for work in works]).to(device)
    weight = torch.full(y.shape[:2], 1.0 / y.shape[1], device=device)
    proportions = torch.stack([work.class_proportions.float() for work in works]).to(device)
    with torch.enable_grad(), native_cpu_convolutions(device), runner.autocast():
        losses = batched_supervised_losses(group(x, per_model=True), y, weight, proportions, works[0].loss)
        grads = torch.autograd.grad(losses.sum(), list(group.params))
    return [tuple(g[i].detach() for g in grads) for i in range(len(works))]
