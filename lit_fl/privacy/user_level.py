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


def model_delta(values: Mapping[str, Tensor], start: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """``w_k - w_t`` over the floating-point entries."""
    return {k: v - start[k] for k, v in values.items() if v.is_floating_point()}


def update_norm(delta: Mapping[str, Tensor]) -> Tensor:
    """``||Delta||``: one l2 norm over all of the update's tensors (squares added in float64, in order, on their
    device; no read to the host)."""
    total = torch.zeros((), dtype=torch.float64)
    for t in delta.values():
        total = total.to(t.device) + t.detach().to(torch.float64).pow(2).sum()
    return total.sqrt()


def clip_delta(delta: Mapping[str, Tensor], norm: Tensor, clip_norm: float) -> dict[str, Tensor]:
    """``Delta * min(1, C / ||Delta||)`` (a zero update stays zero)."""
    factor = (clip_norm / norm.clamp_min(1e-300)).clamp(max=1.0)
    return {k: (v * factor.to(v.dtype)) for k, v in delta.items()}


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
    deltas = [model_delta(values, start) | _tagged(extra) for values, extra in zip(sent, side or [{}] * len(sent))]
    norms = [update_norm(d) for d in deltas]
    clipped = [clip_delta(d, n, clip_norm) for d, n in zip(deltas, norms)]
    floats = {k: v for k, v in start.items() if v.is_floating_point()} | _tagged(side_like or {})
    std = plan.update_noise_multiplier * clip_norm * plan.noise_scale
    noise = gaussian_noise(floats, std, generator)
    out = _averaged_as(plan.expected_cohort, start, sent, clipped, noise)
    side_out = _summed_as(len(sent), clipped, noise) if side_like is not None else []
    next_clip, metrics = _adapt(plan, norms, clip_norm, generator)
    metrics |= {"epsilon": plan.epsilon(round_), "clip_norm": clip_norm}
    return PrivateRound(out, next_clip, metrics, side_out)


#: the key prefix of a side delta among a client's model entries (no model entry name starts with it)
SIDE = "side:"


def _tagged(extra: Mapping[str, Tensor]) -> dict[str, Tensor]:
    return {SIDE + k: v for k, v in extra.items()}


def _summed_as(m: int, clipped: Sequence[Mapping[str, Tensor]],
               noise: Mapping[str, Tensor]) -> list[dict[str, Tensor]]:
    """The side deltas: ``side_k^clip + noise / m`` (their sum: the clipped sum plus the noise); with no client,
    the noise alone."""
    side_noise = {k[len(SIDE):]: v for k, v in noise.items() if k.startswith(SIDE)}
    if m == 0:
        return [side_noise]
    return [{k[len(SIDE):]: v + side_noise[k[len(SIDE):]] / m for k, v in delta.items() if k.startswith(SIDE)}
            for delta in clipped]


def _averaged_as(expected: float, start: Mapping[str, Tensor], sent: Sequence[Mapping[str, Tensor]],
                 clipped: Sequence[Mapping[str, Tensor]], noise: Mapping[str, Tensor]) -> list[dict[str, Tensor]]:
    """Values whose plain average is ``w_t + (sum clipped + noise) / E``: ``w_t + (m / E)(Delta_k^clip + noise / m)``
    (integer entries as sent); with nothing sent, ``w_t + noise / E`` alone."""
    if not sent:
        return [{k: v + noise[k] / expected if k in noise else v for k, v in start.items()}]
    m = len(sent)
    return [{k: (start[k] + (delta[k] + noise[k] / m) * (m / expected)) if k in start and k in delta else v
             for k, v in values.items()} for values, delta in zip(sent, clipped)]


def _adapt(plan: PrivacyPlan, norms: Sequence[Tensor], clip_norm: float,
           generator: torch.Generator) -> tuple[float, dict[str, float]]:
    """Andrew et al. 2021: the next clip norm from the noised share of unclipped updates (fixed clipping: C)."""
    gamma = plan.config.target_quantile
    if gamma is None:
        return clip_norm, {}
    unclipped = float((torch.stack(norms) <= clip_norm).sum()) if norms else 0.0  # one read from the device
    noise = float(torch.randn((), generator=generator, dtype=torch.float64)) * plan.clipped_count_stddev
    share = (unclipped + noise * plan.noise_scale) / plan.expected_cohort
    next_clip = clip_norm * math.exp(-plan.config.clip_learning_rate * (share - gamma))
    return next_clip, {"unclipped_share": share}
