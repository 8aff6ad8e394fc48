"""Losses of DFML and its baselines.

* :func:`wsm_loss` - re-weighted softmax cross-entropy (WSM, DFML Eq. 2, Legate et al. 2023).
* :func:`weighted_kl_loss` - the parameter-weighted multi-teacher KL of DFML Eq. 3.
* :func:`cross_entropy` - plain CE, the ablation of WSM.
* :func:`not_true_kl` - FedNTD's not-true distillation (Lee et al. 2022, Eq. 6): KL over the classes other than
  the label, per sample.
* :func:`peer_losses` - every student's ``a_n sup(z_n) + b_n sum_q W[n, q] KL(p_q || p_n)`` at once from the
  stacked logits ``[N, B, C]``, in a number of kernels that does not grow with N (DFML Eq. 1 for all
  participants, deep mutual learning, the noise distillations). The per-pair functions above are its
  reference: the same math, one pair at a time.

All losses average over the batch (the paper sums; a mean keeps the learning rate independent of the
batch size, see SPEC "WSM ... mean over batch").

Next-token prediction (token sequences, :mod:`lit_fl.data.tokens`) is classification of every position whose target
is not PAD: each loss takes logits ``[..., B, T, V]`` with targets ``[B, T]`` (per-client ``[G, B, T]`` in the
batched losses), keeps those positions (:func:`token_rows`, :func:`token_weights`) and averages over them, so a
batch's loss is the mean over its trained tokens (FedJAX masks PAD the same way, ``per_token_loss *= targets !=
pad``; it then sums per sentence, which only rescales the learning rate).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor


def at_least_float32(tensor: Tensor) -> Tensor:
    """``tensor`` in float32, or float64 where it is float64: losses run in float32 under any autocast, and a
    float64 run (the reference of the equivalence tests) stays float64 throughout."""
    return tensor if tensor.dtype == torch.float64 else tensor.float()


def token_rows(logits: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    """Sequences as classification rows: logits ``[..., B, T, V]`` and targets ``[B, T]`` become ``[..., M, V]`` and
    ``[M]``, the M positions whose target is not PAD. Classification inputs (targets ``[B]``) come back unchanged."""
    if target.ndim < 2:
        return logits, target
    from lit_fl.data.tokens import trained_targets

    keep = trained_targets(target).reshape(-1)
    rows = logits.reshape(*logits.shape[: logits.ndim - 3], -1, logits.shape[-1])
    return rows[..., keep, :], target.reshape(-1)[keep]


def token_weights(target: Tensor, weight: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Per-client sequences as classification rows: targets ``[G, B, T]`` and the per-sample weights ``[G, B]`` of
    :class:`~lit_fl.data.batches.StackedBatches` become targets ``[G, B*T]`` and weights ``[G, B*T]`` that are
    ``1 / m_g`` on the ``m_g`` trained tokens (not PAD) of client g's real samples and 0 elsewhere, so a weighted sum
    is every client's mean over its batch's tokens, in ``dtype`` (the losses'). Classification inputs come back
    unchanged."""
    if target.ndim < 3:
        return target, weight
    from lit_fl.data.tokens import trained_targets

    mask = (trained_targets(target) & (weight > 0).unsqueeze(-1)).to(dtype)
    per_token = mask / mask.sum(dim=(1, 2), keepdim=True).clamp_min(1.0)
    g = target.shape[0]
    return target.reshape(g, -1), per_token.reshape(g, -1)


def flat_positions(logits: Tensor, leading: int) -> Tensor:
    """Logits with ``leading`` dims before the batch: ``[*lead, B, T, V]`` as ``[*lead, B*T, V]`` (sequences), and
    ``[*lead, B, C]`` unchanged."""
    if logits.ndim == leading + 3:
        return logits.reshape(*logits.shape[:leading], -1, logits.shape[-1])
    return logits


def wsm_loss(logits: Tensor, target: Tensor, class_proportions: Tensor) -> Tensor:
    """Re-weighted softmax cross-entropy, DFML Eq. 2, averaged over the batch.

    ``loss = -z_y + logsumexp_c(z_c + log beta_c)``. A class with ``beta_c = 0`` is masked out of the
    normaliser (``log 0 = -inf``), so the model is not pushed away from classes it never sees. With
    ``beta = 1`` for every class the loss is exactly cross-entropy; with uniform proportions ``1/C`` it is
    cross-entropy minus the constant ``log C`` (same gradient).
    """
    logits, target = token_rows(logits, target)
    z = at_least_float32(logits)
    log_beta = torch.log(class_proportions.to(device=z.device, dtype=z.dtype))
    normaliser = torch.logsumexp(z + log_beta, dim=1)
    true_logit = z.gather(1, target.view(-1, 1)).squeeze(1)
    return (normaliser - true_logit).mean()


def cross_entropy(logits: Tensor, target: Tensor, class_proportions: Tensor | None = None) -> Tensor:
    """Plain cross-entropy with the signature of :func:`wsm_loss` (``class_proportions`` is ignored)."""
    logits, target = token_rows(logits, target)
    return F.cross_entropy(at_least_float32(logits), target)


def kl_divergence(teacher_logits: Tensor, student_logits: Tensor, temperature: float = 1.0) -> Tensor:
    """``KL(p_teacher || p_student)`` per batch (mean over samples; over every position of sequences), scaled by
    ``T^2`` (Hinton et al.)."""
    t = temperature
    log_p_student = F.log_softmax(at_least_float32(flat_positions(student_logits, 0)) / t, dim=-1)
    log_p_teacher = F.log_softmax(at_least_float32(flat_positions(teacher_logits, 0)) / t, dim=-1)
    kl = F.kl_div(log_p_student, log_p_teacher, reduction="batchmean", log_target=True)
    return kl * (t * t)



def not_true_logits(logits: Tensor, target: Tensor) -> Tensor:
    """``logits [..., C]`` with the column of each sample's true class ``target [...]`` removed: ``[..., C - 1]``,
    the other classes in their order (FedNTD's ``z~``)."""
    num_classes = logits.shape[-1]
    keep = torch.arange(num_classes - 1, device=logits.device).expand(*target.shape, num_classes - 1)
    keep = keep + (keep >= target.unsqueeze(-1)).long()  # column j < y stays j, column j >= y is j + 1
    return logits.gather(-1, keep)


def not_true_kl(student_logits: Tensor, teacher_logits: Tensor, target: Tensor, temperature: float = 1.0) -> Tensor:
    """FedNTD's not-true distillation per sample (Lee et al., NeurIPS 2022, arXiv 2106.03097, Eq. 6):
    ``KL(q~_g || q~_l) = sum_{c != y} q~_g(c) (log q~_g(c) - log q~_l(c))`` with ``q~ = softmax(z~ / tau)`` over
    the not-true logits ``z~`` (:func:`not_true_logits`) of the teacher (the received global model, detached) and of
    the student. No ``tau^2`` factor (the paper's Eq. 6 and the authors' code have none). Shape: ``target``'s
    (``[B]`` or, batched, ``[G, B]``); a batch loss is its mean."""
    with torch.autocast(device_type=student_logits.device.type, enabled=False):
        t = temperature
        log_q = F.log_softmax(not_true_logits(at_least_float32(student_logits), target) / t, dim=-1)
        log_p = F.log_softmax(not_true_logits(at_least_float32(teacher_logits.detach()), target) / t, dim=-1)
        return (log_p.exp() * (log_p - log_q)).sum(-1)


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
    loss = at_least_float32(student_logits).new_zeros(())
    for q, (z_q, w_q) in enumerate(zip(logits, weights)):
        if q == student or w_q == 0.0:
            continue
        loss = loss + w_q * kl_divergence(z_q.detach(), student_logits, temperature)
    return loss


def teacher_weight_matrix(num_params: Sequence[int], weighted: bool = True) -> Tensor:
    """``W[n, q]`` = :func:`teacher_weights` ``(num_params, n, weighted)[q]``: Eq. 3's weights of every student."""
    return torch.tensor([teacher_weights(num_params, n, weighted) for n in range(len(num_params))])


def supervised_losses(logits: Tensor, target: Tensor, class_proportions: Tensor | None, loss: str) -> Tensor:
    """``[N]``: :func:`wsm_loss` (``loss="wsm"``) or :func:`cross_entropy` of each of the stacked ``[N, B, C]``
    logits against the same ``target`` ``[B]``, batch means (sequences: ``[N, B, T, V]`` against ``[B, T]``, token
    means)."""
    logits, target = token_rows(logits, target)
    z = at_least_float32(logits)
    if loss == "wsm":
        assert class_proportions is not None
        z_norm = z + torch.log(class_proportions.to(device=z.device, dtype=z.dtype))
    else:
        z_norm = z
    normaliser = torch.logsumexp(z_norm, dim=2)
    true_logit = z.gather(2, target.view(1, -1, 1).expand(z.shape[0], -1, 1)).squeeze(2)
    return (normaliser - true_logit).mean(dim=1)


def batched_supervised_losses(
    logits: Tensor, target: Tensor, weight: Tensor, class_proportions: Tensor, loss: str
) -> Tensor:
    """``[G]``: each of G models' :func:`wsm_loss` (``loss="wsm"``, its own ``class_proportions[g]``) or
    :func:`cross_entropy` on its OWN batch: ``logits`` ``[G, B, C]``, ``target`` ``[G, B]``, ``weight`` ``[G, B]``
    the per-sample weights of :class:`~lit_fl.data.batches.StackedBatches` (``1/b_g`` on model g's ``b_g`` samples,
    0 on padding), so entry g is model g's batch mean. Batched local training. Sequences: ``logits`` ``[G, B, T, V]``,
    ``target`` ``[G, B, T]``, entry g model g's mean over its batch's trained tokens (:func:`token_weights`)."""
    target, weight = token_weights(target, weight, at_least_float32(logits).dtype)
    logits = flat_positions(logits, 1)
    with torch.autocast(device_type=logits.device.type, enabled=False):
        z = at_least_float32(logits)
        z_norm = z + torch.log(class_proportions.to(z.dtype)).unsqueeze(1) if loss == "wsm" else z
        per_sample = torch.logsumexp(z_norm, dim=2) - z.gather(2, target.unsqueeze(2)).squeeze(2)
        return (per_sample * weight).sum(dim=1)


def peer_losses(
    logits: Tensor,
    target: Tensor | None,
    weights: Tensor | None,
    supervised_weight: Tensor | float = 1.0,
    distill_weight: Tensor | float = 1.0,
    temperature: float = 1.0,
    class_proportions: Tensor | None = None,
    loss: str = "wsm",
    teacher_entropy: bool = True,
) -> Tensor:
    """Every student's loss at once, ``[N]``, from the stacked logits ``[N, B, C]`` of N models on one batch::

        L_n = a_n * sup(z_n, y) + b_n * T^2 * sum_q W[n, q] KL(p_q^T || p_n^T)

    with the teachers' predictions ``p_q`` detached (DFML Eq. 1 and 3 with ``a = 1 - alpha``, ``b = alpha``;
    deep mutual learning with ``W = [[0, 1], [1, 0]]``). ``sup`` is WSM or CE (``loss``); ``target=None`` leaves
    it out, ``weights=None`` the distillation. With ``teacher_entropy=False`` the KL becomes the soft-target
    cross-entropy ``-sum_c p_q log p_n`` (FedORION Eq. 3: the same gradient, without the teachers' entropy).

    The weighted sum over teachers is one matrix product ``W @ p``: a fixed number of kernels for any N, and no
    value is read back to the host. Runs in float32 whatever the autocast context (as the per-pair functions,
    which cast their inputs). Sequences (``[N, B, T, V]``, ``target`` ``[B, T]``): both terms over the positions
    whose target is not PAD (:func:`token_rows`; every position without a target).
    """
    if target is not None:
        logits, target = token_rows(logits, target)
    logits = flat_positions(logits, 1)
    with torch.autocast(device_type=logits.device.type, enabled=False):
        z = at_least_float32(logits)
        n, b, c = z.shape
        total = z.new_zeros(n)
        if target is not None:
            total = supervised_weight * supervised_losses(z, target, class_proportions, loss)
        if weights is None:
            return total
        t = float(temperature)
        log_q = torch.log_softmax(z / t if t != 1.0 else z, dim=2)
        log_p = log_q.detach()
        p = log_p.exp()
        weights = weights.to(z.dtype)
        mixture = (weights @ p.view(n, b * c)).view(n, b, c)  # sum_q W[n, q] p_q for every student n
        distill = -(mixture * log_q).sum(dim=(1, 2))
        if teacher_entropy:
            distill = distill + weights @ (p * log_p).sum(dim=(1, 2))
        return total + distill_weight * distill * (t * t / b)


def batched_peer_losses(
    logits: Tensor,
    target: Tensor,
    sample_weight: Tensor,
    weights: Tensor | None,
    supervised_weight: Tensor,
    distill_weight: Tensor,
    temperature: float = 1.0,
    class_proportions: Tensor | None = None,
    loss: str = "wsm",
    teacher_entropy: bool = True,
) -> Tensor:
    """:func:`peer_losses` of G clients at once, each on its OWN batch: ``[G, S]`` from the logits ``[S, G, B, C]``
    of every client's S models, ``target`` ``[G, B]``, ``sample_weight`` ``[G, B]`` (``1/b_g`` on client g's
    ``b_g`` samples, 0 on padding: :class:`~lit_fl.data.batches.StackedBatches`) and every client's own
    ``class_proportions`` ``[G, C]``; ``supervised_weight`` and ``distill_weight`` are ``[S]``, ``weights`` the
    ``[S, S]`` teacher matrix shared by the clients. Entry ``(g, n)`` is client g's model n's loss::

        L_gn = a_n * sum_i w_gi sup(z_gni, y_gi) + b_n * T^2 * sum_q W[n, q] sum_i w_gi KL(p_gqi^T || p_gni^T)

    which with ``w_gi = 1/b_g`` is :func:`peer_losses` of client g's batch (batched deep mutual learning). Sequences
    (``[S, G, B, T, V]``, ``target`` ``[G, B, T]``): over every client's trained tokens (:func:`token_weights`)."""
    target, sample_weight = token_weights(target, sample_weight, at_least_float32(logits).dtype)
    logits = flat_positions(logits, 2)
    with torch.autocast(device_type=logits.device.type, enabled=False):
        z = at_least_float32(logits)
        s, g, b, c = z.shape
        z_norm = z + torch.log(class_proportions.to(z.dtype)).unsqueeze(1) if loss == "wsm" else z
        true_logit = z.gather(3, target.view(1, g, b, 1).expand(s, g, b, 1)).squeeze(3)
        w = sample_weight.to(z.dtype)
        total = supervised_weight.to(z.dtype).view(s, 1) * ((torch.logsumexp(z_norm, dim=3) - true_logit) * w).sum(2)
        if weights is None:
            return total.t()
        t = float(temperature)
        log_q = torch.log_softmax(z / t if t != 1.0 else z, dim=3)
        log_p = log_q.detach()
        p = log_p.exp()
        matrix = weights.to(z.dtype)
        mixture = (matrix @ p.view(s, g * b * c)).view(s, g, b, c)  # sum_q W[n, q] p_q, every client and student
        distill = -((mixture * log_q).sum(3) * w).sum(2)
        if teacher_entropy:
            distill = distill + matrix @ (((p * log_p).sum(3)) * w).sum(2)
        return (total + distill_weight.to(z.dtype).view(s, 1) * distill * (t * t)).t()


#: The supervised losses a client phase can use (``algorithm.loss``).
LOSSES = {"wsm": wsm_loss, "ce": cross_entropy}
