"""``ScaffoldTraining``: SCAFFOLD's corrected local step (Karimireddy et al. 2020, Algorithm 1 line 10): local SGD on
the gradient ``g_i(y_i) - c_i + c``; and its fused form for G clients at once (:class:`BatchedScaffoldTraining`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import lightning as L
import torch
from torch import Tensor, nn

from lit_fl.choices import SupervisedLoss
from lit_fl.steps.batched_local_training import BatchedLocalTraining
from lit_fl.steps.local_training import LocalTraining
from lit_fl.steps.optim import SGDConfig


class CorrectedSGD(torch.optim.SGD):
    """SGD whose every step first adds a fixed ``correction`` to each parameter's gradient (``g + (c - c_i)``), then
    steps as :class:`torch.optim.SGD` does: the corrected gradient is what weight decay is added to and what the
    momentum buffer accumulates (the choice of FL-bench's SCAFFOLD; SCAFFOLD's Algorithm 1 has plain
    SGD, where the two readings agree)."""

    def __init__(self, params: Iterable[nn.Parameter], corrections: Sequence[Tensor], **kwargs: float | bool) -> None:
        params = list(params)
        if len(params) != len(corrections):
            raise ValueError(f"CorrectedSGD: {len(params)} parameters, {len(corrections)} corrections")
        super().__init__(params, **kwargs)
        self.corrections = list(corrections)

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201 - torch.optim.Optimizer.step's signature
        params = [p for group in self.param_groups for p in group["params"]]
        pairs = [(p.grad, c) for p, c in zip(params, self.corrections) if p.grad is not None]
        if pairs:
            torch._foreach_add_([g for g, _ in pairs], [c.to(g.dtype) for g, c in pairs])
        return super().step(closure)


class ScaffoldTraining(LocalTraining):
    """:class:`LocalTraining` (CE or WSM) whose gradient is corrected by ``c - c_i`` before every optimizer step
    (SCAFFOLD Algorithm 1, line 10: ``y_i <- y_i - eta_l (g_i(y_i) - c_i + c)``), ``correction = c - c_i`` given
    per parameter of ``model`` (in ``model.parameters()`` order). Steps with equal :meth:`LocalTraining.fusion_key`
    (same loss and SGD settings, no BatchNorm, no random draws) fuse (:meth:`batched`), each client with its own
    correction."""

    def __init__(
        self,
        model: nn.Module,
        class_proportions: Tensor,
        correction: Sequence[Tensor],
        loss: SupervisedLoss = "ce",
        optimizer: SGDConfig | None = None,
    ) -> None:
        super().__init__(model, class_proportions, loss, optimizer)
        shapes = [tuple(p.shape) for p in model.parameters()]
        if [tuple(c.shape) for c in correction] != shapes:
            raise ValueError("ScaffoldTraining: the correction must have the model's parameter shapes")
        for i, c in enumerate(correction):  # buffers: moved with the step to the runner's device
            self.register_buffer(f"correction_{i}", c.detach().clone(), persistent=False)
        self.num_corrections = len(shapes)

    def corrections(self) -> list[Tensor]:
        return [getattr(self, f"correction_{i}") for i in range(self.num_corrections)]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        config = self.optimizer_config
        return CorrectedSGD(self.model.parameters(), self.corrections(), lr=config.lr, momentum=config.momentum,
                            weight_decay=config.weight_decay, foreach=True)

    @classmethod
    def batched(cls, steps: Sequence[ScaffoldTraining], num_batches: Sequence[int]) -> L.LightningModule:
        """G steps with equal :meth:`fusion_key` as one :class:`BatchedScaffoldTraining`."""
        return BatchedScaffoldTraining(steps, num_batches)


class BatchedScaffoldTraining(BatchedLocalTraining):
    """G clients' :class:`ScaffoldTraining` as one step: :class:`BatchedLocalTraining`'s losses, and one
    :class:`CorrectedSGD` over the stacked weights whose correction of stacked parameter ``[G_a, *shape]`` is the
    stack of the G_a clients' own ``c - c_i``: every model's gradient is corrected by its own client's correction
    (SCAFFOLD Algorithm 1, line 10, per client), then SGD, momentum and weight decay act per element as alone."""

    def __init__(self, steps: Sequence[ScaffoldTraining], num_batches: Sequence[int]) -> None:
        first = steps[0]
        super().__init__([s.model for s in steps], [s.class_proportions for s in steps], num_batches,
                         first.loss_name, first.optimizer_config)
        self.register_stacked("correction", [s.corrections() for s in steps])

    def corrections(self) -> list[Tensor]:
        """The stacked corrections, one per stacked parameter of :attr:`slot` (in ``slot.parameters()`` order)."""
        return self.stacked("correction")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        config = self.slot_optimizers[0]
        return CorrectedSGD(self.slot.parameters(), self.corrections(), lr=config.lr, momentum=config.momentum,
                            weight_decay=config.weight_decay, foreach=True)
