"""Client partitions: ``iid``, ``dirichlet(beta)`` and ``shards(zeta)``, then the 80:20 train/validation split.

Every function takes a ``numpy.random.Generator`` so that the partition stream is independent of every
other source of randomness (DESIGN: one seeded generator per concern).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from lit_fl.choices import PARTITIONS
from lit_fl.constraints import Bounds, Choices, PositiveFloat, PositiveInt, check_arguments


@dataclass
class ClientSplit:
    """Indices (into the dataset's train tensors) of one client's train and validation samples."""

    train: np.ndarray
    val: np.ndarray


def partition_iid(labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffle and deal into ``num_clients`` equal parts (sizes differ by at most one)."""
    order = rng.permutation(len(labels))
    return [np.sort(part) for part in np.array_split(order, num_clients)]


def partition_dirichlet(
    labels: np.ndarray,
    num_clients: int,
    beta: PositiveFloat,
    rng: np.random.Generator,
    min_samples: int = 2,
) -> list[np.ndarray]:
    """Per class, proportions ``~ Dir_N(beta)`` decide how its samples are dealt over clients.

    No rejection loop: a draw is never repeated. Clients left with fewer than ``min_samples`` samples
    (frequent for tiny ``beta`` and many clients) take samples from the largest clients, one at a time,
    so that every client can hold a train and a validation split; at most ``min_samples * N`` moves.
    """
    check_arguments(partition_dirichlet, {"beta": beta}, "data.")
    num_classes = int(labels.max()) + 1
    owner = np.empty(len(labels), dtype=np.int64)
    for c in range(num_classes):
        idx = np.flatnonzero(labels == c)
        rng.shuffle(idx)
        proportions = rng.dirichlet(np.full(num_clients, beta))
        cuts = (np.cumsum(proportions)[:-1] * len(idx)).astype(np.int64)
        for client, chunk in enumerate(np.split(idx, cuts)):
            owner[chunk] = client
    parts = _group(owner, num_clients)
    return _top_up(parts, min(min_samples, len(labels) // num_clients), rng)


def _group(owner: np.ndarray, num_clients: int) -> list[np.ndarray]:
    """Indices of every client from an owner vector, with one sort (fast for thousands of clients)."""
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(num_clients + 1))
    return [order[bounds[n] : bounds[n + 1]] for n in range(num_clients)]


def _top_up(parts: list[np.ndarray], min_samples: int, rng: np.random.Generator) -> list[np.ndarray]:
    sizes = np.array([len(p) for p in parts])
    needy = np.flatnonzero(sizes < min_samples)
    if len(needy) == 0:
        return [np.sort(p) for p in parts]
    parts = [list(p) for p in parts]
    for n in needy:
        while len(parts[n]) < min_samples:
            donor = int(np.argmax([len(p) for p in parts]))
            parts[n].append(parts[donor].pop(int(rng.integers(len(parts[donor])))))
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def partition_shards(labels: np.ndarray, num_clients: int, zeta: PositiveInt,
                     rng: np.random.Generator) -> list[np.ndarray]:
    """Def-KT's pathological split: sort by label, cut into ``N * zeta`` equal shards (at most one per sample), deal
    ``zeta`` each."""
    check_arguments(partition_shards, {"zeta": zeta}, "data.")
    Bounds(high=len(labels) // num_clients, note=f"({num_clients} clients x zeta shards of {len(labels)} samples)"
           ).check("data.zeta", zeta)
    num_shards = num_clients * zeta
    order = np.argsort(labels, kind="stable")
    shards = np.array_split(order, num_shards)
    dealt = rng.permutation(num_shards).reshape(num_clients, zeta)
    return [np.sort(np.concatenate([shards[s] for s in row])) for row in dealt]


def partition(
    labels: np.ndarray,
    num_clients: int,
    scheme: str,
    rng: np.random.Generator,
    beta: float = 0.5,
    zeta: int = 2,
) -> list[np.ndarray]:
    """Dispatch to one of :data:`SCHEMES` (``natural``, the fourth of :data:`~lit_fl.choices.PARTITIONS`, is the
    dataset's own clients: :func:`lit_fl.data.natural.partition_natural`)."""
    Choices(tuple(SCHEMES)).check("data.partition", scheme)
    return SCHEMES[scheme](labels, num_clients, rng, beta, zeta)


#: the partitions of pooled samples by name: ``(labels, num_clients, rng, beta, zeta) -> parts``
SCHEMES: dict[str, Callable[[np.ndarray, int, np.random.Generator, float, int], list[np.ndarray]]] = {
    "iid": lambda labels, n, rng, beta, zeta: partition_iid(labels, n, rng),
    "dirichlet": lambda labels, n, rng, beta, zeta: partition_dirichlet(labels, n, beta, rng),
    "shards": lambda labels, n, rng, beta, zeta: partition_shards(labels, n, zeta, rng),
}
assert {*SCHEMES, "natural"} == set(PARTITIONS), "every partition of data.partition is a scheme or natural"


def split_train_val(parts: list[np.ndarray], val_fraction: float, rng: np.random.Generator) -> list[ClientSplit]:
    """Split every client's samples ``1 - val_fraction : val_fraction`` (SPEC: 80:20), seeded.

    A client with at least two samples keeps at least one in each split.
    """
    splits = []
    for idx in parts:
        shuffled = rng.permutation(idx)
        n_val = int(round(val_fraction * len(idx)))
        if len(idx) >= 2 and val_fraction > 0:
            n_val = min(max(n_val, 1), len(idx) - 1)
        splits.append(ClientSplit(train=np.sort(shuffled[n_val:]), val=np.sort(shuffled[:n_val])))
    return splits


def class_proportions(labels: Tensor, num_classes: int) -> Tensor:
    """``beta_c`` of WSM: the fraction of each label among ``labels`` (zeros where a class is absent). For token
    sequences ``(N, T)`` the labels are the trained targets (every token but PAD, :mod:`lit_fl.data.tokens`)."""
    labels = labels.cpu()
    if labels.ndim == 2:
        from lit_fl.data.tokens import trained_targets

        labels = labels[trained_targets(labels)]
    counts = torch.bincount(labels, minlength=num_classes).float()
    return counts / counts.sum().clamp_min(1.0)
