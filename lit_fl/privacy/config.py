"""The ``privacy`` config section: which mechanism, its clipping, noise and accounting."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from lit_fl.constraints import Bounds, OpenUnitInterval, PositiveFloat, PositiveInt, check_fields
from lit_fl.errors import ConfigError

Level = Literal["none", "user", "sample"]
#: how a round's clients are drawn (the accountant's sampling scheme)
Sampling = Literal["poisson", "fixed"]
#: dp-accounting's accountants
AccountantName = Literal["rdp", "pld"]
#: the largest noise multiplier lit-fl takes or calibrates to: a hundred times the clip norm on the sum
MAX_NOISE_MULTIPLIER = 100.0
NoiseMultiplier = Annotated[float, Bounds(0, MAX_NOISE_MULTIPLIER)]


@dataclass(frozen=True)
class PrivacyConfig:
    """Differential privacy of the run (docs/privacy.md).

    Args:
        level: ``none``, or ``user``: user-level (central) DP, DP-FedAvg (McMahan et al. 2018): the server clips
            every client's model update (its model minus the round's broadcast model) to ``clip_norm`` and adds
            Gaussian noise of standard deviation ``noise_multiplier * clip_norm`` to their sum. For server methods
            whose uploads are model weights; on a decentralized method every model a client releases is clipped
            against its public reference and noised by it (lit_fl.privacy.exchange). Or ``sample``: sample-level
            DP, DP-SGD (Abadi et al. 2016) in every client training phase: each sample's gradient clipped to
            ``clip_norm``, Gaussian noise of standard deviation ``noise_multiplier * clip_norm`` on every batch's
            sum; an accountant per client.
        clip_norm: C, the l2 bound of one client's update (the initial one with ``target_quantile``); with level
            ``sample``, of one sample's gradient.
        noise_multiplier: sigma, the noise's standard deviation over the sum's sensitivity; give it or
            ``target_epsilon``.
        target_epsilon: the epsilon(delta) the run may spend over all its rounds; the noise multiplier that reaches
            it is calibrated before the run (``noise_multiplier`` must then be unset).
        delta: the delta of (epsilon, delta)-DP; default ``1 / population^1.1`` (below one over the number of
            records, as it must be).
        client_sampling: ``poisson`` (each client joins a round with probability ``algorithm.client_fraction``;
            add/remove-one accounting, McMahan et al. 2018) or ``fixed`` (the method's fixed-size cohort;
            replace-one accounting, where one client moves the sum by 2 C).
        accountant: ``rdp`` (Renyi DP) or ``pld`` (privacy loss distributions, tighter; Poisson sampling only), both
            from Google's dp-accounting.
        noise_cohort_size: pfl-research's option: the noise is that of a cohort of this many clients (its standard
            deviation scaled by the expected cohort over this), and the accounting samples this many of
            ``population``; simulates production-scale privacy with few simulated clients.
        population: the number of users the accounting samples from (default: the federation's clients).
        target_quantile: adaptive clipping (Andrew et al. 2021): the share of updates to leave unclipped; the clip
            norm follows it geometrically. Unset: fixed clipping at ``clip_norm``.
        clip_learning_rate: eta_C, the geometric step of adaptive clipping (Andrew et al.: 0.2).
        clipped_count_stddev: sigma_b, the noise on the count of unclipped updates (default: expected cohort / 20,
            Andrew et al.); part of the privacy budget.
    """

    level: Level = "none"
    clip_norm: PositiveFloat = 1.0
    noise_multiplier: NoiseMultiplier | None = None
    target_epsilon: PositiveFloat | None = None
    delta: OpenUnitInterval | None = None
    client_sampling: Sampling = "poisson"
    accountant: AccountantName = "rdp"
    noise_cohort_size: PositiveInt | None = None
    population: PositiveInt | None = None
    target_quantile: OpenUnitInterval | None = None
    clip_learning_rate: PositiveFloat = 0.2
    clipped_count_stddev: PositiveFloat | None = None

    def __post_init__(self) -> None:
        check_fields(self, "privacy.")
        if self.level == "none":
            return
        if (self.noise_multiplier is None) == (self.target_epsilon is None):
            raise ConfigError("privacy: give exactly one of privacy.noise_multiplier and privacy.target_epsilon "
                              f"(got noise_multiplier {self.noise_multiplier}, target_epsilon {self.target_epsilon})")
        if self.accountant == "pld" and self.client_sampling != "poisson":
            raise ConfigError("privacy.accountant: pld accounts for client_sampling poisson only; use rdp with "
                              "client_sampling fixed")

    @property
    def enabled(self) -> bool:
        return self.level != "none"

    def delta_for(self, units: int, unit: str, leak: str) -> float:
        """``delta``, or by default ``1 / units^1.1`` (``units``: the users, or a client's records, that one guarantee
        covers); one line when it is not below ``1 / units`` (``unit`` names them, ``leak`` says what could leak)."""
        delta = self.delta if self.delta is not None else 1.0 / units ** 1.1
        if delta >= 1.0 / units:
            raise ConfigError(f"privacy.delta: {delta:g} must be below 1 / ({unit}) = 1/{units}, or {leak} could leak "
                              "with probability delta")
        return delta

    def refuse_user_level_keys(self, owner: str, taker: str) -> None:
        """One line for a key of user-level DP on a server (``owner``) given to another level (``taker``)."""
        for key in ("noise_cohort_size", "population", "target_quantile"):
            if getattr(self, key) is not None:
                raise ConfigError(f"privacy.{key}: belongs to {owner}; {taker} takes clip_norm, noise_multiplier or "
                                  "target_epsilon, delta and accountant")
