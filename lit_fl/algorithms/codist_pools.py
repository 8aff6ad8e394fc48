"""Knowledge codistillation's two client pools (papers/codistillation.txt Algorithm 1; SPEC "Knowledge
codistillation"): the whole pool ``P`` trains the small model, the high-capacity clients ``P_H`` the large one.

Here: who is in ``P_H`` (:func:`resolve_large_clients`), the ``pool_domains`` key (:func:`check_pool_domains`), the
large server model (:func:`large_server_model`) and a client as a member of one pool (:func:`pool_member`), the
participant of :class:`~lit_fl.algorithms.server.ServerAlgorithm`'s round that a pool samples.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from lit_fl.algorithms.global_model import memory_format
from lit_fl.errors import ConfigError
from lit_fl.models import create_model

if TYPE_CHECKING:
    from torch import Tensor, nn

    from lit_fl.federation.state import Client, Federation

SMALL, LARGE = "small", "large"
POOLS = (SMALL, LARGE)


def check_pool_domains(pool_domains: Mapping[str, str] | None) -> dict[str, str]:
    """``pool_domains`` as a dict (empty for None); one line for a key that is not a pool."""
    out = dict(pool_domains or {})
    for pool, domain in out.items():
        if pool not in POOLS:
            raise ConfigError(f"algorithm.pool_domains: {pool!r} is not a pool; allowed: {', '.join(POOLS)}")
        if not isinstance(domain, str):
            raise ConfigError(f"algorithm.pool_domains.{pool}: {domain!r} is not a domain name; allowed: a domain of "
                              "the data (stackoverflow: question, answer)")
    return out


def resolve_large_clients(spec: float | Sequence[int], num_clients: int, seed: int) -> list[int]:
    """The high-capacity client ids: ``round(f * N)`` (at least 1) drawn once from ``seed``, or a list."""
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        count = max(1, min(num_clients, int(math.floor(spec * num_clients + 0.5))))
        rng = np.random.default_rng([seed, 7])
        return sorted(int(n) for n in rng.choice(num_clients, size=count, replace=False))
    ids = [int(n) for n in spec]
    bad = [n for n in ids if not 0 <= n < num_clients]
    if bad:
        raise ConfigError(f"algorithm.large_clients: {bad} are not client ids (allowed: 0..{num_clients - 1})")
    if len(set(ids)) != len(ids):
        raise ConfigError(f"algorithm.large_clients: repeated client ids in {ids}")
    return sorted(ids)


def large_server_model(arch: str, federation: Federation) -> nn.Module:
    """The large server model: ``arch`` initialised from its own seed (``seed * 1000 + 998``, the global generator
    untouched), on the device and in the memory layout of the clients' models."""
    import torch

    first = federation.clients[0].model
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(federation.seed * 1_000 + 998)
        large = create_model(arch, federation.data.input_shape, federation.num_classes)
    param = next(first.parameters())
    return large.to(param.device, memory_format=memory_format(first))


def pool_member(client: Client, arch: str, model: nn.Module, train_idx: Tensor, class_proportions: Tensor) -> Client:
    """``client`` as a member of a pool: a :class:`~lit_fl.federation.state.Client` with its id and validation split
    over ``model`` (of ``arch``: the client's model of that pool) and ``train_idx`` (what it trains on in the pool,
    whose class proportions are ``class_proportions``). Training the member trains ``model``."""
    from lit_fl.federation.state import Client

    return Client(client.id, arch, model, train_idx, client.val_idx, class_proportions)
