"""Every client's system: its compute rate and link, drawn once from the run's seed or read from traces."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lit_fl.system.config import SystemConfig
from lit_fl.system.traces import Availability, read_availability, read_capacities

#: the seed stream of the systems' draws (independent of every other stream of the run)
_STREAM = 9_973


@dataclass(frozen=True)
class ClientSystem:
    """One client: ``rate`` samples per second on a model of one million parameters, its link (Mbit/s, seconds)
    and when it is there (None: always)."""

    rate: float
    upload_mbps: float
    download_mbps: float
    latency_s: float
    availability: Availability | None = None

    def compute_s(self, sample_mparams: float) -> float:
        """Seconds to train on samples worth ``sample_mparams`` (samples times the model's millions of parameters)."""
        return sample_mparams / self.rate

    def available(self, t: float) -> bool:
        return self.availability is None or self.availability.available(t)

    def leaves(self, t: float) -> float:
        """When the client, there at ``t``, leaves (infinity: never)."""
        return math.inf if self.availability is None else self.availability.leaves(t)


def build_systems(config: SystemConfig, num_clients: int, seed: int) -> list[ClientSystem]:
    """Every client's :class:`ClientSystem`: traces where given, else the configured distribution and links."""
    rates = _rates(config, num_clients, seed)
    up = [config.upload_mbps] * num_clients
    down = [config.download_mbps] * num_clients
    if config.capacity_trace is not None:
        capacities = read_capacities(Path(config.capacity_trace), num_clients)
        rates = [c.rate for c in capacities]
        up = down = [c.mbps for c in capacities]
    windows: list[Availability | None] = [None] * num_clients
    if config.availability_trace is not None:
        windows = list(read_availability(Path(config.availability_trace), num_clients))
    return [ClientSystem(r, u, d, config.latency_s, w) for r, u, d, w in zip(rates, up, down, windows)]


def _rates(config: SystemConfig, num_clients: int, seed: int) -> list[float]:
    rng = np.random.default_rng([seed, _STREAM])
    if config.speed == "lognormal":
        return [float(v) for v in config.speed_scale * np.exp(config.speed_sigma * rng.standard_normal(num_clients))]
    if config.speed == "zipf":
        return [config.speed_scale / float(k) for k in rng.zipf(config.speed_zipf_a, num_clients)]
    return [config.speed_scale] * num_clients
