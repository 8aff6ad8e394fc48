"""User-level differential privacy on the server pipeline: DP-FedAvg (McMahan, Ramage, Talwar, Zhang, ICLR 2018,
"Learning Differentially Private Recurrent Language Models", Algorithm 1) with optional adaptive clipping (Andrew,
Thakkar, McMahan, Ramaswamy, NeurIPS 2021, Algorithm 1).

A round, for the updates that arrived (each client's model after local training, ``w_k``; the broadcast ``w_t``):

    Delta_k       = w_k - w_t                                   (float tensors; integer buffers travel untouched)
    Delta_k^clip  = Delta_k * min(1, C / ||Delta_k||)           (one l2 norm over all of the client's tensors)
    Delta         = (sum_k Delta_k^clip + N(0, (sigma_Delta C s)^2 I)) / E
    w_{t+1}       = w_t + Delta                                 (the server's weighted average, weights 1)

``E`` is the expected cohort (``q N``), ``s`` the noise scale of ``noise_cohort_size`` (1 without it). The server
pipeline hands the method's ``server_update`` one update per client, ``w_t + (m / E)(Delta_k^clip + noise / m)`` with
weight 1, so its average is exactly ``w_t + Delta`` and the server optimizers (FedAvgM, FedAdam) step on the noised
pseudo-gradient. An empty cohort still sends the noise (``w_t + noise / E``), as the accounting assumes.

Adaptive clipping: ``b_k = 1[||Delta_k|| <= C]``; ``b = (sum_k b_k + N(0, (sigma_b s)^2)) / E``;
``C <- C exp(-eta_C (b - gamma))``.

Vectorised across clients: every tensor of the model is one ``[m, ...]`` stack of the round's clients, so a round's
kernels grow with the model's tensors, not with its clients, and the norms stay on the device (one read, with
adaptive clipping, for the count).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from torch import Tensor

    from lit_fl.privacy.plan import PrivacyPlan

#: the key prefix of a side delta among a client's model entries (no model entry name starts with it)
SIDE = "side:"


@dataclass(frozen=True)
class PrivateRound:
    """What one round of user-level DP produced: the values the server averages with weight 1 each (one per update
    that arrived, in order; with none, the one value ``w_t + noise / E``), the next round's clip norm and the round's
    metrics."""

    values: list[dict[str, Tensor]]
    clip_norm: float
    metrics: dict[str, float]
    #: the clients' side deltas (SCAFFOLD's control change), clipped with their model deltas and each carrying
    #: ``1 / m`` of their noise: their sum is ``sum_k side_k^clip + noise``; with nothing sent, the noise alone
    side: list[dict[str, Tensor]] = field(default_factory=list)


def stacked_deltas(start: Mapping[str, Tensor], sent: Sequence[Mapping[str, Tensor]],
                   side: Sequence[Mapping[str, Tensor]] = ()) -> dict[str, Tensor]:
    """``Delta_k = w_k - w_t`` of every floating-point entry, stacked over the clients (``[m, ...]``), then the
    clients' side deltas (keys prefixed with :data:`SIDE`)."""
    deltas = {k: torch.stack([values[k] for values in sent]) - v for k, v in start.items() if v.is_floating_point()}
    if side:
        deltas |= {SIDE + k: torch.stack([extra[k] for extra in side]) for k in side[0]}
    return deltas


def update_norms(deltas: Mapping[str, Tensor]) -> Tensor:
    """``||Delta_k||`` of every client, ``[m]``: one l2 norm over all of the client's tensors (squares added in
    float64, tensor by tensor in order, on their device; no read to the host)."""
    total: Tensor | None = None
    for t in deltas.values():
        squared = t.detach().to(torch.float64).pow(2).flatten(1).sum(1)
        total = squared if total is None else total + squared.to(total.device)
    assert total is not None, "a client's update has no floating-point entry"
    return total.sqrt()


def clip_deltas(deltas: Mapping[str, Tensor], norms: Tensor, clip_norm: float) -> dict[str, Tensor]:
    """``Delta_k * min(1, C / ||Delta_k||)`` for every client (a zero update stays zero)."""
    factor = (clip_norm / norms.clamp_min(1e-300)).clamp(max=1.0)
    return {k: v * factor.to(v.dtype).reshape(-1, *[1] * (v.dim() - 1)) for k, v in deltas.items()}


def gaussian_noise(like: Mapping[str, Tensor], std: float, generator: torch.Generator) -> dict[str, Tensor]:
    """``N(0, std^2)`` for every entry, drawn on the CPU from ``generator`` (the run's privacy stream, so a resumed
    run draws the same noise), in each tensor's dtype, moved to its device."""
    return {k: (torch.randn(v.shape, generator=generator, dtype=v.dtype) * std).to(v.device)
            for k, v in like.items()}


def private_round(plan: PrivacyPlan, start: Mapping[str, Tensor], sent: Sequence[Mapping[str, Tensor]],
                  clip_norm: float, generator: torch.Generator, round_: int,
                  side: Sequence[Mapping[str, Tensor]] = (), side_like: Mapping[str, Tensor] | None = None
                  ) -> PrivateRound:
    """One round of DP-FedAvg over the models ``sent`` (module docstring); ``start``: the broadcast model ``w_t``.

    ``side``: per client, deltas it sends beside its model (SCAFFOLD's control change ``Delta c_i``); each client's
    model delta and side deltas are clipped together (one norm over both: the pair is one vector of sensitivity C)
    and both sums are noised at the same standard deviation, so the accountant charges one Gaussian mechanism.
    ``side_like``: their shapes (for the noise of a round with no client)."""
    floats = {k: v for k, v in start.items() if v.is_floating_point()} | _tagged(side_like or {})
    std = plan.update_noise_multiplier * clip_norm * plan.noise_scale
    noise = gaussian_noise(floats, std, generator)
    if not sent:
        values = [{k: v + noise[k] / plan.expected_cohort if k in noise else v for k, v in start.items()}]
        side_out = [_untagged(noise)] if side_like is not None else []
        norms = torch.zeros(0, dtype=torch.float64)
    else:
        deltas = stacked_deltas(start, sent, side)
        norms = update_norms(deltas)
        clipped = clip_deltas(deltas, norms, clip_norm)
        values = _averaged_as(plan.expected_cohort, start, sent, clipped, noise)
        side_out = _summed_as(len(sent), clipped, noise) if side_like is not None else []
    next_clip, metrics = _adapt(plan, norms, clip_norm, generator)
    metrics |= {"epsilon": plan.epsilon(round_), "clip_norm": clip_norm}
    return PrivateRound(values, next_clip, metrics, side_out)


def _tagged(extra: Mapping[str, Tensor]) -> dict[str, Tensor]:
    return {SIDE + k: v for k, v in extra.items()}


def _untagged(entries: Mapping[str, Tensor]) -> dict[str, Tensor]:
    return {k[len(SIDE):]: v for k, v in entries.items() if k.startswith(SIDE)}


def _averaged_as(expected: float, start: Mapping[str, Tensor], sent: Sequence[Mapping[str, Tensor]],
                 clipped: Mapping[str, Tensor], noise: Mapping[str, Tensor]) -> list[dict[str, Tensor]]:
    """Values whose plain average is ``w_t + (sum clipped + noise) / E``: ``w_t + (m / E)(Delta_k^clip + noise / m)``
    for every client at once (integer entries as each sent them)."""
    m = len(sent)
    moved = {k: (start[k] + (clipped[k] + noise[k] / m) * (m / expected)).unbind(0) for k in start if k in clipped}
    return [{k: moved[k][n] if k in moved else v for k, v in values.items()} for n, values in enumerate(sent)]


def _summed_as(m: int, clipped: Mapping[str, Tensor], noise: Mapping[str, Tensor]) -> list[dict[str, Tensor]]:
    """The side deltas: ``side_k^clip + noise / m`` (their sum: the clipped sum plus the noise)."""
    side = {k: (v + noise[SIDE + k] / m).unbind(0) for k, v in _untagged(clipped).items()}
    return [{k: rows[n] for k, rows in side.items()} for n in range(m)]


def _adapt(plan: PrivacyPlan, norms: Tensor, clip_norm: float,
           generator: torch.Generator) -> tuple[float, dict[str, float]]:
    """Andrew et al. 2021: the next clip norm from the noised share of unclipped updates (``norms``: the round's
    ``||Delta_k||``, ``[m]``; fixed clipping: C)."""
    gamma = plan.config.target_quantile
    if gamma is None:
        return clip_norm, {}
    unclipped = float((norms <= clip_norm).sum())  # one read from the device
    noise = float(torch.randn((), generator=generator, dtype=torch.float64)) * plan.clipped_count_stddev
    share = (unclipped + noise * plan.noise_scale) / plan.expected_cohort
    next_clip = clip_norm * math.exp(-plan.config.clip_learning_rate * (share - gamma))
    return next_clip, {"unclipped_share": share}
