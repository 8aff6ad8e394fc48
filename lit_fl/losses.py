"""Losses of DFML and its baselines.

* :func:`wsm_loss` - re-weighted softmax cross-entropy (WSM, DFML Eq. 2, Legate et al. 2023).
* :func:`weighted_kl_loss` - the parameter-weighted multi-teacher KL of DFML Eq. 3.
* :func:`cross_entropy` - plain CE, the ablation of WSM.

All losses average over the batch (the paper sums; a mean keeps the learning rate independent of the
batch size, see SPEC "WSM ... mean over batch").
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor


def wsm_loss(logits: Tensor, target: Tensor, class_proportions: Tensor) -> Tensor:
    """Re-weighted softmax cross-entropy, DFML Eq. 2, averaged over the batch.

    ``loss = -z_y + logsumexp_c(z_c + log beta_c)``. A class with ``beta_c = 0`` is masked out of the
    normaliser (``log 0 = -inf``), so the model is not pushed away from classes it never sees. With
    ``beta = 1`` for every class the loss is exactly cross-entropy; with uniform proportions ``1/C`` it is
    cross-entropy minus the constant ``log C`` (same gradient).
    """
    log_beta = torch.log(class_proportions.to(device=logits.device, dtype=torch.float32))
    z = logits.float()
    normaliser = torch.logsumexp(z + log_beta, dim=1)
    true_logit = z.gather(1, target.view(-1, 1)).squeeze(1)
    return (normaliser - true_logit).mean()


def cross_entropy(logits: Tensor, target: Tensor, class_proportions: Tensor | None = None) -> Tensor:
    """Plain cross-entropy with the signature of :func:`wsm_loss` (``class_proportions`` is ignored)."""
    return F.cross_entropy(logits.float(), target)


def kl_divergence(teacher_logits: Tensor, student_logits: Tensor, temperature: float = 1.0) -> Tensor:
    """``KL(p_teacher || p_student)`` per batch (mean over samples), scaled by ``T^2`` (Hinton et al.)."""
    t = temperature
    log_p_student = F.log_softmax(student_logits.float() / t, dim=1)
    log_p_teacher = F.log_softmax(teacher_logits.float() / t, dim=1)
    kl = F.kl_div(log_p_student, log_p_teacher, reduction="batchmean", log_target=True)
    return kl * (t * t)


def teacher_weights(num_params: Sequence[int], student: int, weighted: bool = True) -> list[float]:
    """Weights of DFML Eq. 3 for ``student``: ``Phi_q / sum_{u != n} Phi_u`` over teachers ``q != n``.

    With ``weighted=False`` (ablation of A.4.7) every teacher gets ``1 / (|P| - 1)``. The student's own
    entry is 0.
    """
    others = [q for q in range(len(num_params)) if q != student]
    if not others:
        return [0.0] * len(num_params)
    if weighted:
        total = float(sum(num_params[q] for q in others))
        return [0.0 if q == student else num_params[q] / total for q in range(len(num_params))]
    return [0.0 if q == student else 1.0 / len(others) for q in range(len(num_params))]


def weighted_kl_loss(
    logits: Sequence[Tensor],
    student: int,
    weights: Sequence[float],
    temperature: float = 1.0,
) -> Tensor:
    """DFML Eq. 3 for one student: ``sum_q w_q KL(p_q || p_n)`` with detached teachers."""
    student_logits = logits[student]
    loss = student_logits.new_zeros((), dtype=torch.float32)
    for q, (z_q, w_q) in enumerate(zip(logits, weights)):
        if q == student or w_q == 0.0:
            continue
        loss = loss + w_q * kl_divergence(z_q.detach(), student_logits, temperature)
    return loss


#: The supervised losses a client phase can use (``algorithm.loss``).
LOSSES = {"wsm": wsm_loss, "ce": cross_entropy}
