"""``ServerCodistillation``: server models teach each other on unlabeled server data
(papers/codistillation.txt sec. 2, C.4; SPEC "Knowledge codistillation").

Every student ``i`` starts from a frozen snapshot ``S_i`` of itself and learns from the snapshots of the
other models (the teachers): per batch ``x`` (labels, if any, are ignored)

    target_i = (1 - b) * mean_{q != i} softmax(S_q(x) / T) + b * softmax(S_i(x))
    L_i = KL(target_i || softmax(student_i(x)))

``b`` (student regularisation, paper C.4) keeps the student near its start; ``T`` is the teacher temperature
(paper C.4: a softmax temperature of the teacher, so the student and its start are at temperature 1). With
two models (the paper) the teacher of each is simply the other. Both students are optimised by one Adam
(default hyper-parameters, paper C.4) with a parameter group per student: ``L_i`` depends on student ``i``
alone and Adam is per parameter, so this equals one Adam per student, in parallel on the same batches
(paper Algorithms 1 and 2, "in parallel, distill").

On token sequences (:mod:`lit_fl.data.tokens`) every position whose input is not PAD is one distillation sample:
the unlabeled text says where it ends by its padding, not by targets.
"""

from __future__ import annotations

from collections.abc import Sequence

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lit_fl.steps.step_loss import count_loss, reset_loss_counter


def distilled_rows(logits: Tensor, x: Tensor) -> Tensor:
    """The logits that distillation compares: ``[B, C]`` of images unchanged; of token sequences ``x`` ``[B, T]``
    the ``[M, V]`` rows of the positions whose input token is not PAD."""
    from lit_fl.data.tokens import PAD, is_token_batch

    if not is_token_batch(x):
        return logits
    return logits.reshape(-1, logits.shape[-1])[x.reshape(-1) != PAD]


def regularised_target(teacher_logits: Tensor, start_logits: Tensor, temperature: float, student_reg: float) -> Tensor:
    """``(1 - b) * softmax(teacher / T) + b * softmax(student_start)`` (SPEC), in float32."""
    teacher = F.softmax(teacher_logits.float() / temperature, dim=1)
    if student_reg == 0.0:
        return teacher
    return (1.0 - student_reg) * teacher + student_reg * F.softmax(start_logits.float(), dim=1)


def distillation_loss(student_logits: Tensor, target: Tensor) -> Tensor:
    """``KL(target || softmax(student))``, mean over the batch (``0 log 0 = 0``)."""
    return F.kl_div(F.log_softmax(student_logits.float(), dim=1), target, reduction="batchmean")


class ServerCodistillation(L.LightningModule):
    """Distil every student from the other models' snapshots; see the module docstring.

    Args:
        students: the models trained (updated in place).
        snapshots: frozen copies of the students at the start of the phase, same order; student ``i``'s
            start model is ``snapshots[i]``, its teachers the other snapshots. They are neither trained nor
            registered as submodules (they stay in eval mode and out of the optimiser).
        lrs: Adam learning rate per student.
        temperature: ``T`` of the teachers' softmax.
        student_reg: ``b`` in ``[0, 1]``.
    """

    def __init__(
        self,
        students: Sequence[nn.Module],
        snapshots: Sequence[nn.Module],
        lrs: Sequence[float],
        temperature: float = 1.0,
        student_reg: float = 0.0,
    ) -> None:
        super().__init__()
        if len(students) < 2 or len(snapshots) != len(students) or len(lrs) != len(students):
            raise ValueError("ServerCodistillation needs two or more students, one snapshot and one lr each")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if not 0.0 <= student_reg <= 1.0:
            raise ValueError(f"student_reg must be in [0, 1], got {student_reg}")
        self.students = nn.ModuleList(students)
        self.snapshots = [s.eval().requires_grad_(False) for s in snapshots]  # plain list: not submodules
        self.lrs = [float(lr) for lr in lrs]
        self.temperature = float(temperature)
        self.student_reg = float(student_reg)
        reset_loss_counter(self)

    def targets(self, x: Tensor) -> list[Tensor]:
        """The regularised target of every student on ``x``: the mean over its teachers ``q`` of
        :func:`regularised_target` ``(S_q(x), S_i(x))`` (with two models: the other one's)."""
        with torch.no_grad():
            start = [distilled_rows(s(x), x) for s in self.snapshots]
            return [
                torch.stack(
                    [
                        regularised_target(start[q], start[i], self.temperature, self.student_reg)
                        for q in range(len(start))
                        if q != i
                    ]
                ).mean(0)
                for i in range(len(start))
            ]

    def training_step(self, batch: Tensor | tuple[Tensor, ...], batch_idx: int) -> Tensor:
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        targets = self.targets(x)
        total = sum(distillation_loss(distilled_rows(student(x), x), t) for student, t in zip(self.students, targets))
        count_loss(self, total)
        return total

    def configure_optimizers(self) -> torch.optim.Optimizer:
        groups = [{"params": list(s.parameters()), "lr": lr} for s, lr in zip(self.students, self.lrs)]
        return torch.optim.Adam(groups, fused=True)  # fused: no value read back per parameter and step
