"""A run's privacy plan: the ``privacy`` config resolved against the federation and the method before round one
(the calibrated noise, the sampling rate, delta), and its epsilon after any number of rounds."""

from __future__ import annotations

import math
from dataclasses import dataclass

from lit_fl.errors import ConfigError
from lit_fl.privacy.accounting import SampledGaussian, calibrate_noise, epsilon
from lit_fl.privacy.config import MAX_NOISE_MULTIPLIER, PrivacyConfig


@dataclass(frozen=True)
class PrivacyPlan:
    """What a user-level DP round does and what it costs.

    Attributes:
        config: the ``privacy`` section.
        noise_multiplier: z, the total noise multiplier the accountant charges each round (calibrated from
            ``target_epsilon`` when that was given).
        update_noise_multiplier: sigma_Delta, the multiplier of the noise on the updates' sum: z, or with adaptive
            clipping ``(z^-2 - (2 sigma_b)^-2)^(-1/2)`` (Andrew et al. 2021, Theorem 1), the rest of the budget being
            spent on the count of unclipped updates.
        sampling_rate: q, a client's chance to join a round (``algorithm.client_fraction``).
        expected_cohort: ``q * N``: the denominator of the noised average (McMahan et al. 2018's fixed-denominator
            estimator; with ``fixed`` sampling, the cohort's size).
        noise_scale: the standard deviation of the noise on the sum, in units of the clip norm, is
            ``update_noise_multiplier * noise_scale`` (``expected_cohort / noise_cohort_size``; 1 without it).
        mechanism: what the accountant charges one round.
        delta: delta of (epsilon, delta).
        rounds: the rounds of the run (for ``target_epsilon``).
    """

    config: PrivacyConfig
    noise_multiplier: float
    update_noise_multiplier: float
    clipped_count_stddev: float
    sampling_rate: float
    expected_cohort: float
    noise_scale: float
    mechanism: SampledGaussian
    delta: float
    rounds: int

    def epsilon(self, rounds: int) -> float:
        """epsilon(delta) after ``rounds`` rounds."""
        return epsilon(self.mechanism, rounds, self.delta, self.config.accountant)

    def settings(self) -> dict[str, float | str | int | None]:
        """What summary.json records of the run's privacy."""
        return {"level": self.config.level, "noise_multiplier": self.noise_multiplier,
                "update_noise_multiplier": self.update_noise_multiplier, "clip_norm": self.config.clip_norm,
                "adaptive_clipping": self.config.target_quantile is not None, "delta": self.delta,
                "sampling_rate": self.sampling_rate, "client_sampling": self.config.client_sampling,
                "accountant": self.config.accountant, "population": self.mechanism.population,
                "noise_cohort_size": self.config.noise_cohort_size}


def plan_privacy(config: PrivacyConfig, num_clients: int, client_fraction: float, rounds: int) -> PrivacyPlan:
    """Resolve ``config`` for a federation of ``num_clients`` sampled at ``client_fraction`` over ``rounds`` rounds;
    bad combinations are one line naming the key."""
    population = config.population or num_clients
    if config.client_sampling == "fixed":
        expected = float(max(1, round(client_fraction * num_clients)))
    else:
        expected = client_fraction * num_clients
    sample_size = config.noise_cohort_size or expected
    if sample_size > population:
        raise ConfigError(f"privacy.noise_cohort_size: {sample_size} is more than the population of {population} "
                          "users it is sampled from (privacy.population)")
    delta = config.delta_for(population, "number of users", "one user's whole data")
    if config.client_sampling == "fixed" and config.noise_cohort_size is not None:
        raise ConfigError("privacy.noise_cohort_size: takes client_sampling poisson")
    mechanism = SampledGaussian(config.noise_multiplier or 0.0, sample_size, population, config.client_sampling)
    z = config.noise_multiplier
    if config.target_epsilon is not None:
        z = _calibrated(mechanism, rounds, delta, config)
        mechanism = SampledGaussian(z, sample_size, population, config.client_sampling)
    assert z is not None
    count_std = config.clipped_count_stddev or expected / 20
    update_z = _update_multiplier(z, count_std, config)
    return PrivacyPlan(config, z, update_z, count_std, client_fraction, expected,
                       expected / sample_size, mechanism, delta, rounds)


def _calibrated(mechanism: SampledGaussian, rounds: int, delta: float, config: PrivacyConfig) -> float:
    assert config.target_epsilon is not None
    ceiling = SampledGaussian(MAX_NOISE_MULTIPLIER, mechanism.sample_size, mechanism.population, mechanism.sampling)
    if epsilon(ceiling, rounds, delta, config.accountant) > config.target_epsilon:
        raise ConfigError(f"privacy.target_epsilon: {config.target_epsilon:g} cannot be reached in {rounds} rounds "
                          f"at delta {delta:g} with a noise multiplier up to {MAX_NOISE_MULTIPLIER:g}; raise it, "
                          "or lower rounds or algorithm.client_fraction")
    return calibrate_noise(mechanism, rounds, delta, config.target_epsilon, config.accountant)


def _update_multiplier(z: float, count_std: float, config: PrivacyConfig) -> float:
    """Andrew et al. 2021, Theorem 1: noising the update sum at sigma_Delta and the unclipped count at sigma_b costs
    what one Gaussian of multiplier ``(sigma_Delta^-2 + (2 sigma_b)^-2)^(-1/2)`` costs."""
    if config.target_quantile is None:
        return z
    if z == 0:
        return 0.0
    rest = z ** -2 - (2 * count_std) ** -2
    if rest <= 0:
        raise ConfigError(f"privacy.clipped_count_stddev: {count_std:g} leaves no budget for the updates at noise "
                          f"multiplier {z:g} (adaptive clipping needs 2 * clipped_count_stddev > noise_multiplier)")
    return math.sqrt(1 / rest)

