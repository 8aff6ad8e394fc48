"""Knowledge codistillation's two client pools (papers/codistillation.txt Algorithm 1; SPEC "Knowledge
codistillation"): the whole pool ``P`` trains the small model, the high-capacity clients ``P_H`` the large one.

Here: who is in ``P_H`` (:func:`resolve_large_clients`), the rules of the pools' keys, checked once before the run
(:class:`PoolRules`, with ``large_clients``' ids a :class:`~lit_fl.algorithms.requirements.ClientIds`), the large
server model (:func:`large_server_model`) and a client as a member of one pool (:func:`pool_member`), the
participant of :class:`~lit_fl.algorithms.server.ServerAlgorithm`'s round that a pool samples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from lit_fl.algorithms.global_model import memory_format
from lit_fl.algorithms.requirements import ClientIds, Requirement
from lit_fl.models import assign_evenly, create_model, resolve_pool

if TYPE_CHECKING:
    from torch import Tensor, nn

    from lit_fl.data.dataset import ImageDataset
    from lit_fl.federation.state import Client, Federation

SMALL, LARGE = "small", "large"
POOLS = (SMALL, LARGE)


@dataclass(frozen=True)
class PoolRules(Requirement):
    """The pools' keys against the rest of the config: every client trains the small model (``models.pool`` gives
    ``small_arch`` alone), ``pool_domains`` names pools; and against the loaded data: it has the domains
    ``pool_domains`` restricts to, and images for the flips and mixup of ``distill_augment``."""

    def config_problem(self, algorithm: Any, experiment: Any) -> str | None:
        archs = assign_evenly(resolve_pool(experiment.models.pool), experiment.data.num_clients)
        other = sorted(set(archs) - {algorithm.small_arch})
        if other:
            return (f"algorithm.small_arch is {algorithm.small_arch!r} but models.pool gives {other}: every client "
                    f"trains the small model, set models.pool: [{algorithm.small_arch}]")
        pool = next((p for p in algorithm.pool_domains if p not in POOLS), None)
        if pool is not None:
            return f"algorithm.pool_domains: {pool!r} is not a pool; allowed: {', '.join(POOLS)}"
        return None

    def dataset_problem(self, algorithm: Any, dataset: ImageDataset) -> str | None:
        if algorithm.distill_augment and dataset.is_sequence:
            return (f"algorithm.distill_augment: flips and mixup are for images and {dataset.name} holds token "
                    "sequences; allowed: false")
        if algorithm.pool_domains and dataset.domains is None:
            return (f"algorithm.pool_domains: {dataset.name}'s samples have no domains; give the dataset its domains "
                    "(stackoverflow: data.options.domains: type) or set pool_domains: null")
        return None


#: what a codistillation config must meet (besides a server and held-out data)
POOL_RULES = (PoolRules("trains two pools"),
              ClientIds("high-capacity client ids", key="large_clients", at_least_one=True))


def resolve_large_clients(spec: float | Sequence[int], num_clients: int, seed: int) -> list[int]:
    """The high-capacity client ids: ``round(f * N)`` (at least 1) drawn once from ``seed``, or a list."""
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        count = max(1, min(num_clients, int(math.floor(spec * num_clients + 0.5))))
        rng = np.random.default_rng([seed, 7])
        return sorted(int(n) for n in rng.choice(num_clients, size=count, replace=False))
    return sorted(int(n) for n in spec)  # client ids, each once (POOL_RULES)


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
