"""``EnsembleDistillation``: FedDF's server fusion (Lin et al., NeurIPS 2020, arXiv 2006.07242, Algorithm 1 lines
7-10; docs/baselines.md "FedDF").

Every student (one server model per architecture, started from its FedAvg average) learns from the ENSEMBLE of the
received client models on unlabeled proxy batches ``d``::

    t(d) = 1/K sum_k f(x_k, d)                       (the teachers' averaged logits; ``avg_logits``)
    L    = KL( softmax(t(d) / T) || softmax(f(x, d) / T) )      mean over the batch

then ``clip_grad_norm(grad, clip_norm)`` per student and an Adam step whose learning rate follows a cosine from
``lr`` to 0 over the phase's ``total_steps`` (``CosineAnnealingLR``: step ``j`` (0-based) at
``lr (1 + cos(pi j / total_steps)) / 2``). Teachers run in eval mode (BatchNorm on their running statistics) without
gradients; students in train mode (BatchNorm on the batch, running statistics tracking the proxy), as the reference
code prepares them. All students see the same batches, and their losses are summed: each depends on its own student
only, and clipping and Adam act per student (one parameter group each), so this equals distilling the students one
after the other on the same batches.

On token sequences (proxy batches ``d`` ``[B, T]``, logits ``[B, T, V]``) every position whose input token is not PAD
is one sample of the KL's mean (:func:`~lit_fl.steps.distillation.distilled_rows`, as codistillation distils): the
per-token KL between the ensemble's and the student's next-token distributions, averaged over those positions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lit_fl.losses import at_least_float32
from lit_fl.steps.distillation import distilled_rows
from lit_fl.steps.step_loss import count_loss, reset_loss_counter


def ensemble_logits(teachers: Sequence[nn.Module], x: Tensor) -> Tensor:
    """``1/K sum_k f_k(x)``: the teachers' logits averaged (float32; float64 in a float64 run)."""
    return torch.stack([at_least_float32(t(x)) for t in teachers]).mean(0)


def kl_to_teacher(student_logits: Tensor, teacher_logits: Tensor, temperature: float,
                  x: Tensor | None = None) -> Tensor:
    """``KL(softmax(t / T) || softmax(s / T))``, mean over the batch (no ``T^2`` factor, as the reference code); with
    the inputs ``x`` of a token batch, mean over its positions whose input is not PAD."""
    if x is not None:
        student_logits, teacher_logits = distilled_rows(student_logits, x), distilled_rows(teacher_logits, x)
    return F.kl_div(F.log_softmax(at_least_float32(student_logits) / temperature, dim=1),
                    F.softmax(at_least_float32(teacher_logits) / temperature, dim=1), reduction="batchmean")


class ClippedCosineAdam(torch.optim.Adam):
    """Adam with, before every step, the gradient of each parameter group clipped to L2 norm ``clip_norm``
    (``torch.nn.utils.clip_grad_norm_``; None = no clipping) and the learning rate of the step set by a cosine from
    each group's ``initial_lr`` to 0 over ``total_steps`` steps (None = constant)."""

    def __init__(self, groups: list[dict], clip_norm: float | None, total_steps: int | None) -> None:
        for group in groups:
            group["initial_lr"] = group["lr"]
        super().__init__(groups, fused=True)  # fused: no value read back per parameter and step (foreach's Adam reads
        # its step counter once per parameter: 6,000 host waits a FedDF round)
        self.clip_norm, self.total_steps, self.num_steps = clip_norm, total_steps, 0

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201 - torch's signature
        for group in self.param_groups:
            if self.clip_norm is not None:
                torch.nn.utils.clip_grad_norm_([p for p in group["params"] if p.grad is not None], self.clip_norm)
            if self.total_steps:
                group["lr"] = group["initial_lr"] * (1 + math.cos(math.pi * self.num_steps / self.total_steps)) / 2
        self.num_steps += 1
        return super().step(closure)


class EnsembleDistillation(L.LightningModule):
    """Distil every student from the ensemble of ``teachers``; see the module docstring.

    Args:
        students: the server models trained (in place), one per architecture.
        teachers: the received client models (neither trained nor registered: eval mode, no gradient).
        lr: Adam's learning rate at the first step (FedDF: 1e-3).
        temperature: ``T`` of both softmaxes (reference code: 1).
        clip_norm: the gradient's L2 norm bound per student (reference code: 5); None = none.
        total_steps: the cosine's period in steps (the phase's length); None = a constant rate.
    """

    def __init__(self, students: Sequence[nn.Module], teachers: Sequence[nn.Module], lr: float = 1e-3,
                 temperature: float = 1.0, clip_norm: float | None = 5.0, total_steps: int | None = None) -> None:
        super().__init__()
        if not students or not teachers:
            raise ValueError("EnsembleDistillation needs at least one student and one teacher")
        self.students = nn.ModuleList(students)
        self.teachers = list(teachers)  # plain list: not submodules, not in the optimizer
        self.lr, self.temperature = float(lr), float(temperature)
        self.clip_norm, self.total_steps = clip_norm, total_steps
        reset_loss_counter(self)

    def training_step(self, batch: Tensor | tuple[Tensor, ...], batch_idx: int) -> Tensor:
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        modes = [t.training for t in self.teachers]
        try:
            for t in self.teachers:
                t.eval()
            with torch.no_grad():
                target = ensemble_logits(self.teachers, x)
        finally:
            for t, mode in zip(self.teachers, modes):
                t.train(mode)
        total = sum(kl_to_teacher(s(x), target, self.temperature, x) for s in self.students)
        count_loss(self, total / len(self.students))
        return total

    def configure_optimizers(self) -> torch.optim.Optimizer:
        groups = [{"params": list(s.parameters()), "lr": self.lr} for s in self.students]
        return ClippedCosineAdam(groups, self.clip_norm, self.total_steps)


class ServerEnsemble(nn.Module):
    """The ensemble of server models: ``forward`` averages their logits (FedORION sec. 4.1 reports FedDF "based on
    the ensemble of the global models"). Evaluated like any server model (``federation.server["global"]`` ->
    ``server_acc/global``); it holds no weights of its own: its ``state_dict`` is empty (the members are checkpointed
    under their own names), and the evaluator's change tracking sees the members' tensors."""

    def __init__(self, members: Sequence[nn.Module]) -> None:
        super().__init__()
        if not members:
            raise ValueError("ServerEnsemble needs at least one model")
        self.members = nn.ModuleList(members)

    def forward(self, x: Tensor) -> Tensor:
        return ensemble_logits(list(self.members), x)

    def state_dict(self, *args, **kwargs) -> dict:  # noqa: ANN002, ANN003 - nn.Module's signature
        return {}

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):  # noqa: ANN001, ANN201
        if state_dict:
            raise ValueError("ServerEnsemble has no weights of its own; load its members instead")
        return torch.nn.modules.module._IncompatibleKeys([], [])
