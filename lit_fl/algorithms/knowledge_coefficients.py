"""KT-pFL's knowledge coefficient matrix (Zhang et al., NeurIPS 2021, arXiv 2111.02862; :mod:`lit_fl.algorithms.ktpfl`
steps 4-5): the personalized soft predictions ``t_n = sum_m c_nm s_m``, the coefficient loss, and its projected
gradient step with every row of ``C`` kept on the probability simplex."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor


def personalized_targets(coefficients: Tensor, soft: Tensor) -> Tensor:
    """``t_n = sum_m c_nm s_m``: ``coefficients`` ``[K, K]`` (row ``n``: client ``n``'s weights), ``soft`` ``[K, P,
    C]`` (every client's soft predictions on the ``P`` public samples; ``[K, P, T, V]`` on token sequences); returns
    ``soft``'s shape."""
    import torch

    return torch.einsum("nm,m...->n...", coefficients, soft)


def coefficient_loss(coefficients: Tensor, soft: Tensor, kl_weight: float, rho: float) -> Tensor:
    """``lambda sum_n mean_p KL(t_np || s_np) + rho sum_n ||c_n - 1/K||^2`` with ``t = personalized_targets(c, s)``
    (``0 log 0 = 0``)."""
    import torch

    k = coefficients.shape[0]
    targets = personalized_targets(coefficients, soft)
    log_ratio = torch.log(targets.clamp_min(torch.finfo(targets.dtype).tiny)) - torch.log(soft)
    kl = torch.where(targets > 0, targets * log_ratio, torch.zeros_like(targets)).sum(dim=2).mean(dim=1).sum()
    return kl_weight * kl + rho * ((coefficients - 1.0 / k) ** 2).sum()


def project_rows_to_simplex(v: Tensor) -> Tensor:
    """Euclidean projection of every row onto the probability simplex (Duchi et al. 2008): ``max(v - tau, 0)`` with
    ``tau`` such that the row sums to 1."""
    import torch

    k = v.shape[1]
    u, _ = torch.sort(v, dim=1, descending=True)
    css = u.cumsum(dim=1) - 1.0
    ind = torch.arange(1, k + 1, dtype=v.dtype, device=v.device)
    rho = (u - css / ind > 0).sum(dim=1, keepdim=True)  # the number of positive entries, >= 1
    tau = css.gather(1, rho - 1) / rho.to(v.dtype)
    return (v - tau).clamp_min(0.0)


def update_coefficients(coefficients: Tensor, soft: Tensor, lr: float, kl_weight: float, rho: float) -> Tensor:
    """One projected gradient step of :func:`coefficient_loss` on ``coefficients`` (``[K, K]``, rows on the simplex),
    computed in float64, returned in ``coefficients``' dtype."""
    import torch

    c = coefficients.detach().double().requires_grad_(True)
    with torch.enable_grad():
        loss = coefficient_loss(c, soft.detach().double(), kl_weight, rho)
        (grad,) = torch.autograd.grad(loss, c)
    return project_rows_to_simplex(c.detach() - lr * grad).to(coefficients.dtype)


def distilled_positions(soft: Tensor, x: Tensor) -> Tensor:
    """The public samples the coefficient loss averages over: ``soft`` ``[K, P, C]`` unchanged; on token sequences
    (``x`` ``[P, T]``, ``soft`` ``[K, P, T, V]``) the ``[K, M, V]`` predictions at the M positions whose input is not
    PAD (each position one sample, as the clients' distillation counts them)."""
    from lit_fl.data.tokens import PAD, is_token_batch

    if not is_token_batch(x):
        return soft
    return soft.flatten(1, 2)[:, (x != PAD).reshape(-1).to(soft.device)]
