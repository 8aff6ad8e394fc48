"""User-level differential privacy on the exchanges of decentralized methods: every model a client releases (sends to
a peer or an aggregator, or returns as an aggregator) is clipped and noised by that client before it leaves.

A release by client k of weights ``w`` (every floating-point entry of its model):

    r_k      = k's public reference: its initial weights (public: drawn from the run's seed), then the last model it
               released or adopted from releases (a function of earlier releases only)
    Delta    = w - r_k,   Delta^clip = Delta * min(1, C / ||Delta||)     (one l2 norm over all of the entries)
    released = r_k + Delta^clip + N(0, (sigma C)^2 I)

Because ``r_k`` depends on earlier releases alone, each release is one Gaussian mechanism on k's data and everything a
peer does with it is post-processing. The unit is a client's whole data (replacing it moves ``Delta^clip`` anywhere
in the C-ball: sensitivity 2 C, so the accountant charges a Gaussian of multiplier sigma / 2), with no sampling
amplification (a client knows when it sends). Client k's epsilon composes the releases it made.

Why the sender's own reference and not "what the receiver holds": the receiver's model is not public to the sender
(sending against it would leak it) and, with several architectures (DFML), the receiver holds no model of the
sender's; ``r_k`` is public by construction and follows the sender, so the delta is one round's training.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from lit_fl.errors import ConfigError
from lit_fl.privacy.accounting import SampledGaussian, calibrate_noise, epsilon_of_steps
from lit_fl.privacy.config import MAX_NOISE_MULTIPLIER, PrivacyConfig
from lit_fl.privacy.per_client import PerClientPlan

if TYPE_CHECKING:
    from torch import nn

    from lit_fl.privacy.state import PrivacyState

Weights = dict[str, Tensor]


@dataclass(frozen=True)
class ExchangePlan(PerClientPlan):
    """What every release does, and what it costs its client."""

    def client_epsilon(self, releases: int) -> float:
        """epsilon(delta) of a client after ``releases`` releases (Gaussians of multiplier sigma / 2, composed)."""
        return epsilon_of_steps({_mechanism(self.noise_multiplier): releases}, self.delta, self.config.accountant)

    def epsilons(self, state: PrivacyState, num_clients: int) -> list[float]:
        return [self.client_epsilon(state.releases.get(k, 0)) for k in range(num_clients)]

    def settings(self) -> dict[str, float | str | int | None]:
        return {"level": "user", "mechanism": "exchange", "noise_multiplier": self.noise_multiplier,
                "clip_norm": self.clip_norm, "delta": self.delta, "accountant": self.config.accountant}


def _mechanism(sigma: float) -> SampledGaussian:
    """One release: a Gaussian of multiplier sigma / 2 (sensitivity 2 C), without sampling (rate 1)."""
    return SampledGaussian(sigma / 2, 1, 1)


def plan_exchange_privacy(config: PrivacyConfig, num_clients: int, rounds: int) -> ExchangePlan:
    """Resolve ``config`` for a decentralized method of ``num_clients`` over ``rounds`` rounds; ``target_epsilon`` is
    calibrated for a client that releases once every round (the most any of these methods releases)."""
    config.refuse_user_level_keys("user-level DP on a server", "DP on decentralized exchanges")
    if config.client_sampling != "poisson":
        raise ConfigError("privacy.client_sampling: a decentralized method draws its own participants; DP on its "
                          "exchanges takes no client_sampling (leave it unset)")
    delta = config.delta_for(num_clients, "number of users", "one user's whole data")
    sigma = config.noise_multiplier
    if config.target_epsilon is not None:
        if ExchangePlan(config, MAX_NOISE_MULTIPLIER, delta).client_epsilon(rounds) > config.target_epsilon:
            raise ConfigError(f"privacy.target_epsilon: {config.target_epsilon:g} cannot be reached in {rounds} "
                              f"releases at delta {delta:g} with a noise multiplier up to {MAX_NOISE_MULTIPLIER:g}; "
                              "raise it, or lower rounds")
        sigma = 2 * calibrate_noise(_mechanism(2.0), rounds, delta, config.target_epsilon, config.accountant)
    assert sigma is not None
    return ExchangePlan(config, sigma, delta)


def start_references(models: Mapping[int, nn.Module], state: PrivacyState) -> None:
    """Every client's first public reference (``models``: client id -> its model): its initial weights (a run's
    start, before any training)."""
    for client, model in models.items():
        state.references[client] = _copy(model.state_dict())


def released(plan: ExchangePlan, state: PrivacyState, owner: int, weights: Mapping[str, Tensor]) -> Weights:
    """Client ``owner`` releases ``weights`` (module docstring): the noised weights; its reference becomes them and
    the release is counted."""
    (out,) = released_jointly(plan, state, owner, [weights], [state.references[owner]])
    state.references[owner] = _copy(out)
    return out


def released_jointly(plan: ExchangePlan, state: PrivacyState, owner: int, weights: Sequence[Mapping[str, Tensor]],
                     references: Sequence[Mapping[str, Tensor]]) -> list[Weights]:
    """Client ``owner`` releases several models at once (an aggregator's returns: ``weights[i]`` against the
    public ``references[i]``, the models it received): one norm over all their deltas, clipped to C, noise sigma C
    on every entry; one release (one Gaussian mechanism) counted."""
    deltas = [{k: v - references[i][k].to(v.device) for k, v in w.items() if v.is_floating_point()}
              for i, w in enumerate(weights)]
    norm = torch.sqrt(sum(d.double().pow(2).sum() for delta in deltas for d in delta.values()))
    scale = min(1.0, plan.clip_norm / max(float(norm), 1e-12))
    std = plan.noise_multiplier * plan.clip_norm
    out = []
    for w, reference, delta in zip(weights, references, deltas):
        entry = dict(w)
        for k, d in delta.items():
            noise = torch.randn(d.shape, generator=state.noise, dtype=torch.float64).to(d.device, d.dtype)
            entry[k] = reference[k].to(d.device) + d * scale + std * noise
        out.append(entry)
    state.releases[owner] = state.releases.get(owner, 0) + 1
    return out


def adopt(state: PrivacyState, client: int, model: nn.Module) -> None:
    """Client ``client`` now holds ``model``, built from releases alone (an average of released models, a noised
    return): it is its new public reference."""
    state.references[client] = _copy(model.state_dict())


def _copy(weights: Mapping[str, Tensor]) -> Weights:
    return {k: v.detach().clone() for k, v in weights.items()}
