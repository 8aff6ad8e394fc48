"""Who can reach whom: full mesh (default), the two-group topology of DFML A.4.10, ring, random d-regular.

Selection draws the next aggregator among the previous aggregator's neighbours and the senders among the
aggregator's neighbours, so a model never crosses a missing link. With ``relay`` the senders are drawn among
every client the aggregator can reach over several hops, and each hop is counted in the ledger.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from lit_fl.constraints import Bounds, PositiveInt, check_fields
from lit_fl.errors import ConfigError

TopologyName = Literal["mesh", "two_group", "ring", "regular"]
TOPOLOGIES: tuple[str, ...] = ("mesh", "two_group", "ring", "regular")


@dataclass
class TopologyConfig:
    """Network topology.

    Args:
        name: mesh (everyone reaches everyone), two_group (DFML A.4.10: odd and even addresses form two
            meshes joined by one link between their median clients), ring, or regular (random d-regular).
        degree: neighbours per client for ``regular`` (d < N; N * d must be even).
        relay: senders may be any client the aggregator reaches over several hops (models are relayed by
            the clients in between, every hop counted in the communication ledger); False = neighbours only.
            DFML Tables 11-12 state "50 clients and 25 senders" on the two-group topology, where a client
            that is not on the bridge has only 24 neighbours: 25 senders need relaying through the bridge, so
            the Table 11-12 configs set ``relay: true``. The next aggregator is always a neighbour.
    """

    name: TopologyName = "mesh"
    degree: PositiveInt = 4
    relay: bool = False

    def __post_init__(self) -> None:
        check_fields(self, "topology.")


class RelayError(RuntimeError):
    """A method sent a model to a client that is not a neighbour while ``topology.relay`` is false (a bug in the
    method, not bad input: it keeps its traceback)."""


class Topology:
    """An undirected graph over client ids ``0..N-1`` as a boolean adjacency matrix (no self loops)."""

    def __init__(self, name: str, adjacency: np.ndarray, relay: bool = False) -> None:
        self.name = name
        self.adjacency = adjacency.astype(bool)
        np.fill_diagonal(self.adjacency, False)
        self.relay = relay
        self._distances: dict[int, np.ndarray] = {}

    @property
    def num_clients(self) -> int:
        return len(self.adjacency)

    def neighbours(self, client: int) -> np.ndarray:
        return np.flatnonzero(self.adjacency[client])

    def connected(self, a: int, b: int) -> bool:
        return bool(self.adjacency[a, b])

    def reachable(self, client: int) -> np.ndarray:
        """Possible senders to ``client``: its neighbours, or with ``relay`` every client it reaches."""
        if not self.relay:
            return self.neighbours(client)
        distance = self.distances(client)
        return np.flatnonzero(distance > 0)

    def hops(self, a: int, b: int) -> int:
        """Links a model crosses from ``a`` to ``b`` on a shortest path (1 between neighbours). Without ``relay`` a
        model only crosses one link: ``a`` and ``b`` must be neighbours."""
        if self.adjacency[a, b]:
            return 1
        if not self.relay:
            raise RelayError(
                f"client {a} sends to client {b}, which is not its neighbour on the {self.name} topology, and "
                "topology.relay is false: a method may only send to neighbours (or set topology.relay: true)"
            )
        distance = int(self.distances(a)[b])
        if distance < 0:
            raise ValueError(f"client {b} cannot be reached from client {a} on the {self.name} topology")
        return distance

    def distances(self, source: int) -> np.ndarray:
        """Shortest-path hop counts from ``source`` (breadth-first; -1 = unreachable), cached per source."""
        if source not in self._distances:
            distance = np.full(self.num_clients, -1, dtype=np.int64)
            distance[source] = 0
            frontier, level = np.array([source]), 0
            while len(frontier):
                level += 1
                nxt = np.flatnonzero(self.adjacency[frontier].any(axis=0) & (distance < 0))
                distance[nxt] = level
                frontier = nxt
            self._distances[source] = distance
        return self._distances[source]

    def edges(self) -> list[tuple[int, int]]:
        rows, cols = np.nonzero(np.triu(self.adjacency))
        return list(zip(rows.tolist(), cols.tolist()))


def mesh(num_clients: int) -> Topology:
    return Topology("mesh", np.ones((num_clients, num_clients), dtype=bool))


def two_group(num_clients: int) -> tuple[Topology, tuple[int, int]]:
    """Odd addresses (1, 3, ... = ids 0, 2, ...) and even addresses (ids 1, 3, ...) each form a mesh; the
    median client of each group holds the single bridge link. Returns the topology and the bridge."""
    check_topology("two_group", num_clients)
    groups = [np.arange(0, num_clients, 2), np.arange(1, num_clients, 2)]
    adjacency = np.zeros((num_clients, num_clients), dtype=bool)
    for group in groups:
        adjacency[np.ix_(group, group)] = True
    bridge = (int(groups[0][(len(groups[0]) - 1) // 2]), int(groups[1][(len(groups[1]) - 1) // 2]))
    adjacency[bridge[0], bridge[1]] = adjacency[bridge[1], bridge[0]] = True
    return Topology("two_group", adjacency), bridge


def ring(num_clients: int) -> Topology:
    adjacency = np.zeros((num_clients, num_clients), dtype=bool)
    ids = np.arange(num_clients)
    adjacency[ids, (ids + 1) % num_clients] = True
    adjacency[(ids + 1) % num_clients, ids] = True
    return Topology("ring", adjacency)


def random_regular(num_clients: int, degree: int, rng: np.random.Generator) -> Topology:
    """A d-regular graph: the circulant graph linking i to i +- 1..d/2 (and i + N/2 for odd d), relabelled by
    a random permutation. Always valid, no retry loop."""
    check_topology("regular", num_clients, degree)
    ids = np.arange(num_clients)
    adjacency = np.zeros((num_clients, num_clients), dtype=bool)
    for k in range(1, degree // 2 + 1):
        adjacency[ids, (ids + k) % num_clients] = adjacency[(ids + k) % num_clients, ids] = True
    if degree % 2:
        adjacency[ids, (ids + num_clients // 2) % num_clients] = True
    perm = rng.permutation(num_clients)
    return Topology("regular", adjacency[np.ix_(perm, perm)])


def check_topology(name: str, num_clients: int, degree: int = 0) -> None:
    """The rules a topology puts on the federation, one line naming the key: checked before any data loads
    (:mod:`lit_fl.validation`) and where the graph is built."""
    if name == "two_group":
        Bounds(4, note="(the two_group topology: two meshes of at least 2)").check("data.num_clients", num_clients)
    if name == "regular" and (degree >= num_clients or (num_clients * degree) % 2):
        raise ConfigError(f"topology.degree: a {degree}-regular graph on {num_clients} clients needs degree < "
                          f"{num_clients} and N x degree even")


def build_topology(config: TopologyConfig, num_clients: int, seed: int) -> Topology:
    if config.name == "mesh":
        topology = mesh(num_clients)
    elif config.name == "two_group":
        topology = two_group(num_clients)[0]
    elif config.name == "ring":
        topology = ring(num_clients)
    else:
        topology = random_regular(num_clients, config.degree, np.random.default_rng([seed, 3]))
    topology.relay = config.relay
    return topology
