"""The natural partition (``data.partition: natural``): lit-fl's clients are a federated dataset's own clients
(FEMNIST's writers, Shakespeare's speaking roles, StackOverflow's users), not a split of pooled samples.

``data.num_clients`` of the dataset's clients are drawn without replacement from stream :data:`NATURAL_STREAM` of
the seed and kept in the file's order; asking for as many as the dataset has takes all of them. A loader that reads
only the clients it needs (a 342,477-user StackOverflow file) draws them with :func:`select_clients` too, so the
federation is the same whether the loader or the partition made the draw. Each client's samples (less those held out
for the server, ``data.server_fraction``) are then split into train and validation like any partition's.
"""

from __future__ import annotations

import numpy as np

from lit_fl.constraints import Bounds
from lit_fl.errors import ConfigError

#: the seed stream of the natural clients' draw (0: partition, 1: selection, ..., 8: proxy)
NATURAL_STREAM = 9


def select_clients(num_available: int, num_clients: int, seed: int, source: str) -> np.ndarray:
    """Positions (sorted, in file order) of the ``num_clients`` clients drawn from ``num_available``."""
    Bounds(1, num_available, note=f"({source} has {num_available} clients; {num_available} takes all of them)").check(
        "data.num_clients", num_clients)
    if num_clients == num_available:
        return np.arange(num_available)
    rng = np.random.default_rng([seed, NATURAL_STREAM])
    return np.sort(rng.choice(num_available, size=num_clients, replace=False))


def partition_natural(clients: tuple[np.ndarray, ...] | None, num_train: int, client_pool: np.ndarray,
                      num_clients: int, seed: int, name: str) -> list[np.ndarray]:
    """The train indices of the ``num_clients`` drawn clients, restricted to ``client_pool`` (the indices of the
    ``num_train`` train samples that the server does not hold)."""
    if clients is None:
        raise ConfigError(f"data.partition: natural needs a federated dataset with its own clients (femnist, "
                          f"fed_cifar100, shakespeare, stackoverflow); {name} has none; allowed: iid, dirichlet, "
                          "shards")
    chosen = select_clients(len(clients), num_clients, seed, name)
    pool = np.zeros(num_train, dtype=bool)
    pool[client_pool] = True
    return [np.sort(clients[i][pool[clients[i]]]) for i in chosen]
