"""Who takes part in a round: the aggregator and its senders (DFML sec. 3.1, SPEC), and the sampled clients of the
methods with a server (:func:`select_fraction`)."""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from lit_fl.federation.topology import Topology, mesh

if TYPE_CHECKING:
    from lit_fl.federation.state import Federation


@dataclass(frozen=True)
class Participants:
    """The aggregator ``a`` and senders ``S`` of one round; ``P = S + {a}`` with the aggregator first."""

    aggregator: int
    senders: tuple[int, ...]

    @property
    def all(self) -> tuple[int, ...]:
        return (self.aggregator, *self.senders)


def num_senders(num_clients: int, sender_fraction: float) -> int:
    """``round(sender_fraction * N)`` (halves round up), at most ``N - 1``, at least 1 for two clients or more."""
    if num_clients < 2:
        return 0
    return int(min(max(math.floor(sender_fraction * num_clients + 0.5), 1), num_clients - 1))


def select_participants(
    round_: int,
    previous_aggregator: int | None,
    num_clients: int,
    sender_fraction: float,
    rng: np.random.Generator,
    fixed_aggregator: int | None = None,
    topology: Topology | None = None,
    available: Collection[int] | None = None,
) -> Participants | None:
    """Round 1: the lowest id aggregates. Later, the previous aggregator draws the next one uniformly among
    its neighbours (every other client on a mesh). The aggregator draws ``num_senders`` distinct senders
    among the clients it can reach (:meth:`Topology.reachable`: its neighbours, or everyone it reaches over
    several hops with ``topology.relay``), fewer when it reaches fewer. ``fixed_aggregator`` pins the aggregator
    (ablation of A.4.2).

    ``available`` (the clients there at the round's start on the virtual clock; None: everyone): the aggregator and
    the senders are drawn among them; with no neighbour of the previous aggregator there, the previous aggregator
    keeps the role if it is there, else the lowest id there takes it; None when nobody can aggregate."""
    topology = topology or mesh(num_clients)
    there = _there(available, num_clients)
    if fixed_aggregator is not None:
        aggregator = fixed_aggregator
    elif round_ == 1 or previous_aggregator is None:
        aggregator = 0 if available is None else min(there, default=-1)
    else:
        candidates = _kept(topology.neighbours(previous_aggregator), there)
        if len(candidates):
            aggregator = int(rng.choice(candidates))
        elif available is None or previous_aggregator in there:
            aggregator = previous_aggregator
        else:
            aggregator = min(there, default=-1)
    if aggregator not in there:
        return None
    reachable = _kept(topology.reachable(aggregator), there)
    count = min(num_senders(num_clients, sender_fraction), len(reachable))
    senders = rng.choice(reachable, size=count, replace=False) if count else np.empty(0, dtype=np.int64)
    return Participants(aggregator=aggregator, senders=tuple(int(s) for s in np.sort(senders)))


def _there(available: Collection[int] | None, num_clients: int) -> set[int]:
    return set(range(num_clients)) if available is None else set(available)


def _kept(clients: np.ndarray, there: set[int]) -> np.ndarray:
    """``clients`` that are there, in their order (the array itself when all are)."""
    keep = np.array([int(c) in there for c in clients], dtype=bool)
    return clients if keep.all() else clients[keep]


def cohort(num_clients: int, fraction: float) -> int:
    """``round(fraction * N)``, half up, at least 1, at most N."""
    return int(min(max(math.floor(fraction * num_clients + 0.5), 1), num_clients))


def select_fraction(federation: Federation, fraction: float) -> list[int]:
    """``round(fraction * N)`` distinct clients (half up, at least 1, at most N) drawn from
    ``federation.rng.selection``, sorted: the sampled clients of FedORION (30% a round), SCAFFOLD, server FedAvg and
    the distillation baselines."""
    n = federation.num_clients
    count = cohort(n, fraction)
    return sorted(int(c) for c in federation.rng.selection.choice(n, size=count, replace=False))


def available_clients(federation: Federation) -> list[int] | None:
    """The clients there at the round's start on the virtual clock (``federation.virtual_s``), or None without
    availability windows (``system.availability_trace``): everyone is."""
    system = federation.system_config
    if federation.systems is None or system is None or system.availability_trace is None:
        return None
    return [c for c, s in enumerate(federation.systems) if s.available(federation.virtual_s)]


def select_available(federation: Federation, fraction: float, over_selection: float = 0.0) -> list[int]:
    """Under the virtual clock: ``ceil(cohort * (1 + over_selection))`` distinct clients among those available at
    the round's start (``federation.virtual_s``; an offline client cannot be selected), at most all of them, drawn
    from ``federation.rng.selection``, sorted; none when nobody is there."""
    there = available_clients(federation)
    if there is None:  # no availability windows: everyone is there
        there = list(range(federation.num_clients))
    count = min(math.ceil(cohort(federation.num_clients, fraction) * (1 + over_selection) - 1e-9), len(there))
    if count == 0:
        return []
    return sorted(int(there[i]) for i in federation.rng.selection.choice(len(there), size=count, replace=False))


def select_poisson(federation: Federation, rate: float) -> list[int]:
    """Every client independently with probability ``rate`` (Poisson sampling, drawn from
    ``federation.rng.selection``), sorted; possibly none. The cohort of user-level DP with ``client_sampling
    poisson`` (McMahan et al. 2018), whose accounting assumes exactly this."""
    draws = federation.rng.selection.random(federation.num_clients)
    return [int(c) for c in np.flatnonzero(draws < rate)]
