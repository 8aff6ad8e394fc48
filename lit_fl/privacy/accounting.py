"""Privacy accounting with Google's ``dp-accounting`` (RDP and PLD accountants).

Why ``dp-accounting``: it is the accounting library of TensorFlow Privacy and of Google's production federated
learning, it has both accountants the field uses (Renyi DP, Mironov 2017; privacy loss distributions, Koskela et al.
2020, tight), the sampling schemes a federated round uses (Poisson, and fixed-size without replacement for the
replace-one relation), and it installs without a deep-learning framework. Opacus's accountants are the independent
reference the tests compare against.

A round of user-level DP is one sampled Gaussian mechanism over the clients: the sum of the sampled clients' clipped
updates plus ``N(0, (sigma * C)^2)``. ``noise_multiplier`` sigma is the ratio of that standard deviation to the sum's
l2 sensitivity under the accountant's relation:

* ``poisson`` sampling, add/remove-one relation: each client joins a round with probability ``q``; sensitivity ``C``.
* ``fixed`` sampling (``m`` of ``N`` without replacement), replace-one relation (Wang, Balle, Kasiviswanathan 2019):
  replacing a client moves the sum by up to ``2 C``, so the mechanism's multiplier is ``sigma / 2``. RDP only.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass

import dp_accounting
from dp_accounting import pld, rdp

from lit_fl.privacy.config import AccountantName, Sampling


class _UnconvergedOrders(logging.Filter):
    """dp-accounting logs a warning for every fractional RDP order whose series does not converge (large sampling
    rates) and leaves that order out; the bound from the other orders stays valid, so lit-fl drops the noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "failed to converge" not in record.getMessage()


logging.getLogger("absl").addFilter(_UnconvergedOrders())

#: RDP orders: dp-accounting's defaults (1.1 to 1,024)
RDP_ORDERS = tuple(rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS)
#: PLD discretisation of the privacy loss (dp-accounting's default 1e-4); pessimistic, so epsilon is an upper bound
PLD_DISCRETIZATION = 1e-4


@dataclass(frozen=True)
class SampledGaussian:
    """One round's mechanism: a Gaussian of multiplier ``noise_multiplier`` on a ``sampling`` subsample of
    ``sample_size`` expected of ``population`` records (clients for user-level DP)."""

    noise_multiplier: float
    sample_size: int | float
    population: int
    sampling: Sampling = "poisson"

    @property
    def rate(self) -> float:
        return float(self.sample_size) / self.population

    def event(self, steps: int) -> dp_accounting.DpEvent:
        """``steps`` compositions of this mechanism, as a dp-accounting event."""
        if self.sampling == "poisson":
            one = dp_accounting.PoissonSampledDpEvent(self.rate, dp_accounting.GaussianDpEvent(self.noise_multiplier))
        else:
            one = dp_accounting.SampledWithoutReplacementDpEvent(
                self.population, int(self.sample_size), dp_accounting.GaussianDpEvent(self.noise_multiplier / 2))
        return dp_accounting.SelfComposedDpEvent(one, steps)


def make_accountant(name: AccountantName, sampling: Sampling) -> dp_accounting.PrivacyAccountant:
    """A fresh accountant for ``sampling``'s neighbouring relation."""
    relation = (dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE if sampling == "poisson"
                else dp_accounting.NeighboringRelation.REPLACE_ONE)
    if name == "rdp":
        return rdp.RdpAccountant(list(RDP_ORDERS), relation)
    return pld.PLDAccountant(relation, value_discretization_interval=PLD_DISCRETIZATION)


def epsilon(mechanism: SampledGaussian, steps: int, delta: float, accountant: AccountantName = "rdp") -> float:
    """epsilon(delta) after ``steps`` rounds of ``mechanism`` (0 after none; inf without noise).

    RDP composes linearly, so the Renyi divergences of one round are computed once per mechanism and scaled by
    ``steps`` (the accountant's own arithmetic for a self-composed event; a run asks every round, and one round's
    orders cost tens of milliseconds)."""
    if steps == 0:
        return 0.0
    if mechanism.noise_multiplier == 0:
        return float("inf")
    if accountant == "rdp":
        one = _one_round_rdp(mechanism)
        return float(rdp.rdp_privacy_accountant.compute_epsilon(one.orders, one.rdp * steps, delta)[0])
    return float(_one_round_pld(mechanism).self_compose(steps).get_epsilon_for_delta(delta))


def epsilon_of_steps(steps: Mapping[SampledGaussian, int], delta: float, accountant: AccountantName = "rdp") -> float:
    """epsilon(delta) after ``steps[m]`` compositions of each mechanism ``m`` (a DP-SGD client's history: its steps
    at each sampling rate); 0 after none, inf when a mechanism without noise ran."""
    taken = {m: k for m, k in steps.items() if k > 0}
    if not taken:
        return 0.0
    if any(m.noise_multiplier == 0 for m in taken):
        return float("inf")
    if accountant == "rdp":
        first = _one_round_rdp(next(iter(taken)))
        total = sum(_one_round_rdp(m).rdp * k for m, k in taken.items())
        return float(rdp.rdp_privacy_accountant.compute_epsilon(first.orders, total, delta)[0])
    composed = None
    for m, k in taken.items():
        one = _one_round_pld(m).self_compose(k)
        composed = one if composed is None else composed.compose(one)
    assert composed is not None
    return float(composed.get_epsilon_for_delta(delta))


@functools.lru_cache(maxsize=4096)
def _one_round_pld(mechanism: SampledGaussian) -> pld.privacy_loss_distribution.PrivacyLossDistribution:
    """One round's privacy loss distribution, as dp-accounting's PLD accountant builds it for a Poisson-sampled
    Gaussian (``steps`` rounds: its ``self_compose``, what the accountant does for a self-composed event)."""
    return pld.privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=mechanism.noise_multiplier, value_discretization_interval=PLD_DISCRETIZATION,
        sampling_prob=mechanism.rate, neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)


@functools.lru_cache(maxsize=4096)
def _one_round_rdp(mechanism: SampledGaussian) -> rdp.RdpAccountant:
    """An RDP accountant that has composed one round of ``mechanism`` (read-only: its ``orders`` and ``rdp``)."""
    acc = make_accountant("rdp", mechanism.sampling)
    acc.compose(mechanism.event(1))
    return acc


def calibrate_noise(mechanism: SampledGaussian, steps: int, delta: float, target_epsilon: float,
                    accountant: AccountantName = "rdp") -> float:
    """The smallest noise multiplier whose epsilon(delta) after ``steps`` rounds is at most ``target_epsilon``
    (dp-accounting's Brent search, to a relative tolerance far below 1 %)."""
    def event(sigma: float) -> dp_accounting.DpEvent:
        return SampledGaussian(sigma, mechanism.sample_size, mechanism.population, mechanism.sampling).event(steps)

    def search(name: AccountantName, bracket: dp_accounting.BracketInterval) -> float:
        return float(dp_accounting.calibrate_dp_mechanism(
            lambda: make_accountant(name, mechanism.sampling), event, target_epsilon, delta, bracket, tol=1e-6))

    sigma = search("rdp", dp_accounting.LowerEndpointAndGuess(1e-3, 1.0))
    if accountant == "rdp":
        return sigma
    # PLD is tighter than RDP (less noise for the same epsilon); its cost grows as the noise shrinks, so it searches
    # below RDP's answer only
    return search("pld", dp_accounting.ExplicitBracketInterval(sigma / 4, sigma))
