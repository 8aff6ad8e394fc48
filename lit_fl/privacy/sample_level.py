"""Sample-level differential privacy: DP-SGD in every client training phase (:mod:`lit_fl.steps.dp_sgd`), with an
accountant per client.

Each client is its own privacy unit holder: the records are its train samples, and every DP-SGD step it takes is a
sampled Gaussian mechanism on them (rate ``q = b / n``, its expected batch over its train size; multiplier sigma on
the per-sample clip norm C). A client's epsilon(delta) composes the steps it actually took (RDP adds up, PLD
composes), so a client that trains less spends less; ``metrics.csv`` has each client's and the largest.

Batches are the method's shuffled fixed-size batches, accounted as if Poisson-sampled at ``q = b / n``: the common
practice of DP-SGD codes (Opacus without Poisson sampling, TensorFlow Privacy's tutorials), not the sampling that
the amplification theorem assumes; ``summary.json`` and docs/privacy.md say so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from lit_fl.errors import ConfigError
from lit_fl.privacy.accounting import SampledGaussian, calibrate_noise, epsilon_of_steps
from lit_fl.privacy.config import MAX_NOISE_MULTIPLIER, PrivacyConfig
from lit_fl.privacy.per_client import PerClientPlan
from lit_fl.steps.dp_sgd import DPSGD, ClientNoise

if TYPE_CHECKING:
    from lit_fl.privacy.state import PrivacyState
    from lit_fl.steps.phase import ClientWork

#: what ``summary.json`` says of the batches the accounting assumes Poisson-sampled
BATCH_SAMPLING_CAVEAT = ("shuffled fixed-size batches, accounted as Poisson sampling at rate batch_size / train "
                         "samples (an approximation: docs/privacy.md)")
#: a client's steps under one mechanism: ``(expected batch b, train samples n) -> steps``
History = Mapping[tuple[int, int], int]


@dataclass(frozen=True)
class SamplePlan(PerClientPlan):
    """What DP-SGD does in every client step, and what it costs each client."""

    def client_epsilon(self, history: History) -> float:
        """epsilon(delta) of one client after the steps of ``history``."""
        return epsilon_of_steps({SampledGaussian(self.noise_multiplier, b, n): steps
                                 for (b, n), steps in history.items()}, self.delta, self.config.accountant)

    def epsilons(self, state: PrivacyState, num_clients: int) -> list[float]:
        """Every client's epsilon(delta) so far (0 for a client that has not trained)."""
        return [self.client_epsilon(state.sample_steps.get(k, {})) for k in range(num_clients)]

    def settings(self) -> dict[str, float | str | int | None]:
        """What summary.json records of the run's privacy."""
        return {"level": "sample", "noise_multiplier": self.noise_multiplier, "clip_norm": self.clip_norm,
                "delta": self.delta, "accountant": self.config.accountant, "batch_sampling": BATCH_SAMPLING_CAVEAT}


def plan_sample_privacy(config: PrivacyConfig, train_sizes: Sequence[int], batch_size: int, local_epochs: int,
                        rounds: int) -> SamplePlan:
    """Resolve ``config`` for clients of ``train_sizes`` that train ``local_epochs`` a round at ``batch_size``;
    bad combinations are one line naming the key. ``target_epsilon`` is calibrated for the worst client if every
    client trained every round (an upper bound on what the run spends)."""
    config.refuse_user_level_keys("user-level DP (privacy.level user)", "level sample")
    delta = config.delta_for(max(train_sizes), "a client's train samples", "one sample")
    sigma = config.noise_multiplier
    if config.target_epsilon is not None:
        sigma = _calibrated(config, _run_histories(train_sizes, batch_size, local_epochs, rounds), delta)
    assert sigma is not None
    return SamplePlan(config, sigma, delta)


def _run_histories(train_sizes: Sequence[int], batch_size: int, local_epochs: int, rounds: int) -> list[History]:
    """The distinct clients' histories if each trained every round."""
    histories = set()
    for n in train_sizes:
        if n:
            b = min(batch_size, n)
            histories.add(((b, n), rounds * local_epochs * math.ceil(n / batch_size)))
    return [dict([h]) for h in sorted(histories)]


def _calibrated(config: PrivacyConfig, histories: list[History], delta: float) -> float:
    """The smallest sigma at which no client's epsilon exceeds the target: calibrated on one client, checked on all,
    recalibrated on a client that still exceeds it (the largest sigma wins)."""
    assert config.target_epsilon is not None
    target = config.target_epsilon

    def worst(sigma: float) -> tuple[float, History]:
        plan = SamplePlan(config, sigma, delta)
        return max((plan.client_epsilon(h), h) for h in histories)

    if worst(MAX_NOISE_MULTIPLIER)[0] > target:
        raise ConfigError(f"privacy.target_epsilon: {target:g} cannot be reached at delta {delta:g} with a noise "
                          f"multiplier up to {MAX_NOISE_MULTIPLIER:g}; raise it, or lower rounds, "
                          "algorithm.local_epochs or raise algorithm.batch_size")
    client = max(histories, key=lambda h: next(iter(h)))  # the largest sampling rate: b/n with the smallest n
    sigma = 0.0
    for _ in range(len(histories)):
        ((b, n), steps), = client.items()
        sigma = max(sigma, calibrate_noise(SampledGaussian(1.0, b, n), steps, delta, target, config.accountant))
        spent, client = worst(sigma)
        if spent <= target * (1 + 1e-6):
            return sigma
    return sigma


@dataclass
class SamplePrivacy:
    """What the phase runner holds under ``privacy.level sample``: the plan, and the state it draws each phase's
    noise seeds from and counts each client's steps in (the federation's :class:`PrivacyState`)."""

    plan: SamplePlan
    state: PrivacyState

    def phase(self, works: Sequence[ClientWork], plans: Sequence[Sequence[object]]) -> list[ClientNoise | None]:
        """Every work's :class:`ClientNoise` (seeds drawn in the works' order, on every process alike), its steps
        counted in the history of the client whose data it trains on (a peer step's: the client ``work.client``,
        e.g. DFML's aggregator); None for a work on data-free batches (noise images); a work DP-SGD cannot take
        is one line."""
        from lit_fl.data.batches import ClientBatches
        from lit_fl.steps.noise import NoiseBatches

        for work in works:
            if isinstance(work.batches, NoiseBatches):
                continue
            if not hasattr(work.step, "data_loss") or not isinstance(work.batches, ClientBatches):
                raise ConfigError(f"privacy.level: sample (DP-SGD) takes client steps that define data_loss on the "
                                  f"client's own batches (docs/extending.md); {type(work.step).__name__} does not")
        seeds = torch.randint(0, 2**62, (len(works),), generator=self.state.noise).tolist()
        noises: list[ClientNoise | None] = []
        for work, plan, seed in zip(works, plans, seeds):
            if isinstance(work.batches, NoiseBatches):
                noises.append(None)
                continue
            batches: ClientBatches = work.batches  # type: ignore[assignment]
            n = len(batches.indices)
            b = min(batches.batch_size, n)
            history = self.state.sample_steps.setdefault(work.client, {})
            history[(b, n)] = history.get((b, n), 0) + len(plan)
            noises.append(ClientNoise(int(seed), len(plan), b))
        return noises

    def dp_sgd(self, noises: Sequence[ClientNoise | None]) -> DPSGD | None:
        """The DP-SGD of a step that trains on these clients' data (None: data-free works)."""
        if any(n is None for n in noises):
            assert all(n is None for n in noises)  # a fused group is of one kind of batches
            return None
        return DPSGD(self.plan.clip_norm, self.plan.noise_multiplier, tuple(noises))  # type: ignore[arg-type]
