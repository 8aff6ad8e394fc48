"""``DFedAvgM``: decentralized FedAvg with heavy-ball momentum (Sun, Li, Wang, "Decentralized Federated Averaging",
IEEE TPAMI 45(4) 2023, arXiv 2104.11375, Algorithm 1), a baseline of UA-PDFL (papers/ua-pdfl.txt sec. 5.1.3).

Round ``k`` (counted from 1), for every client ``i`` in parallel:

1. local training, ``K`` steps of SGD with heavy-ball momentum ``theta`` from the client's current model
   (``y^0 = x_i^k``, ``y^{-1} = y^0``: the momentum buffer starts at zero every round)::

       y^{t+1} = y^t - eta_k * g_i(y^t) + theta * (y^t - y^{t-1}),    z_i^k = y^K

   which is PyTorch's SGD with ``momentum = theta`` and no dampening at a constant ``eta_k`` within the phase
   (``b <- theta b + g``, ``y <- y - eta b``; ``eta b^t = y^t - y^{t+1}``). ``K`` is ``local_epochs`` epochs of
   batches; ``eta_k = lr * lr_decay^(k - 1)`` (UA-PDFL's schedule);
2. mixing with the neighbours of the round's graph through a symmetric doubly stochastic ``W``::

       x_i^{k+1} = sum_j w_ij z_j^k

The graph (UA-PDFL's setting, every client contacts ``N_com`` peers per round): every client draws
``min(N_com, #topology neighbours)`` distinct neighbours (``rng.algorithm``, client order); ``i`` and ``j`` are
linked when either drew the other (an undirected graph, as DFedAvgM requires). ``W`` has Metropolis-Hastings
weights on it: ``w_ij = 1 / (1 + max(d_i, d_j))`` for a link, ``w_ii = 1 - sum_{j != i} w_ij``, 0 elsewhere
(symmetric, rows and columns summing to 1). Each linked pair sends its trained models both ways through the
ledger; a model that does not arrive (``faults.drop_prob``) is not mixed in: its weight goes to the receiver's
own model (``w_ii += w_ij``), so each row stays a convex combination (W is then no longer symmetric).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from lit_fl.algorithms.neighbours import NeighbourAlgorithm
from lit_fl.algorithms.peer import snapshot_states
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.requirements import ONE_ARCHITECTURE
from lit_fl.algorithms.settings import UAPDFL_CLIENTS
from lit_fl.constraints import PositiveInt

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor

    from lit_fl.algorithms.peer import PeerRound
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.runner import StepRunner

    State = dict[str, Tensor]


@register_algorithm
class DFedAvgM(NeighbourAlgorithm):
    """DFedAvgM: local heavy-ball momentum SGD, then Metropolis-Hastings mixing over a random ``N_com``-peer graph.

    All clients need the same architecture (mixing averages whole models; a clear error says so otherwise).

    Args:
        num_peers: ``N_com``, neighbours each client draws per round (UA-PDFL sec. 5.1.4: 5); fewer when a
            client has fewer topology neighbours. Links are undirected, so a client's degree is at least this.
        local_epochs: epochs of local momentum SGD per round, the paper's ``K`` steps (UA-PDFL sec. 5.2 runs
            DFedAvgM with twice the local iterations of the other methods: 2).
        momentum: heavy-ball ``theta`` (UA-PDFL sec. 5.1.4: 0.5).
        lr: initial learning rate ``eta`` (UA-PDFL: 0.05).
        lr_decay: per-round decay, round ``k`` trains at ``lr * lr_decay^(k - 1)`` (UA-PDFL: 0.95).
        loss: ``ce`` (UA-PDFL) or ``wsm``.
        weight_decay: SGD weight decay (neither paper names one: 0).
        batch_size: UA-PDFL: 50.
    """

    #: UA-PDFL secs. 5.2-5.4 (Tables 1-5): final test accuracy averaged over clients, each on its own data
    reports = "local_acc"

    sequence_tasks = False  # not checked on sequences

    requires = (ONE_ARCHITECTURE,)  # weights averaged whole between clients
    exchange_dp = True  # privacy.level user: each client's z_j reaches its neighbours as one release a round
    #: UA-PDFL sec. 5.2 runs DFedAvgM with twice the local iterations of the other methods
    client_defaults = replace(UAPDFL_CLIENTS, local_epochs=2)

    def __init__(self, num_peers: PositiveInt = 5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_peers = num_peers

    def plan(self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger) -> PeerRound:
        """The round's graph (:meth:`draw_graph`: every client receives from its neighbours in it) and its
        Metropolis-Hastings ``W`` (``state["W"]``)."""
        plan = super().plan(round_, federation, runner, ledger)
        plan.state["W"] = metropolis_weights(plan.draw)
        degrees = [len(n) for n in plan.draw.values()]
        plan.extra["mean_degree"] = sum(degrees) / len(degrees)
        return plan

    def peers(self, round_: int, federation: Federation, ledger: CommunicationLedger) -> dict[int, list[int]]:
        return self.draw_graph(federation)

    def client_phase(self, plan: PeerRound, federation: Federation, runner: StepRunner) -> list[float]:
        """Local momentum SGD (a fresh SGD per phase: the momentum buffer is reset every round); ``z_j``, every
        model after it (``state["trained"]``)."""
        losses = super().client_phase(plan, federation, runner)
        plan.state["trained"] = snapshot_states(federation)  # z_j: before any mixing
        plan.state["sent"] = self.releases(plan, federation)
        return losses

    def releases(self, plan: PeerRound, federation: Federation) -> dict[int, dict[str, Tensor]]:
        """What each client's neighbours receive: its ``z_j``, or under DP on the exchanges its one release of the
        round (:func:`~lit_fl.privacy.exchange.released`; every client that sends to a neighbour releases once)."""
        trained = plan.state["trained"]
        if federation.exchange_privacy is None:
            return trained
        from lit_fl.privacy.exchange import released

        assert federation.privacy_state is not None
        senders = sorted({j for peers in plan.draw.values() for j in peers})
        return {j: released(federation.exchange_privacy, federation.privacy_state, j, trained[j]) for j in senders}

    def combine(self, receiver: Client, arrived: list[Client], plan: PeerRound, federation: Federation,
                runner: StepRunner, ledger: CommunicationLedger) -> None:
        """Row ``i`` of ``W`` over the models that arrived, the weight of a dropped one kept by the client's own."""
        i, W, came = receiver.id, plan.state["W"], {c.id for c in arrived}
        row = {i: W[i, i]}
        for j in plan.draw[i]:
            if j in came:
                row[j] = W[i, j]
            else:  # dropped: not mixed in, its weight stays with the client's own model
                row[i] += W[i, j]
        if len(row) > 1:  # its own z_i, its neighbours' releases
            received = [plan.state["trained"][j] if j == i else plan.state["sent"][j] for j in row]
            receiver.set_weights(mix(received, list(row.values())))

    def draw_graph(self, federation: Federation) -> dict[int, list[int]]:
        """The round's undirected graph: every client draws ``min(N_com, #neighbours)`` distinct topology
        neighbours from ``rng.algorithm`` (client order); ``i`` and ``j`` are linked when either drew the other.
        Returns every client's sorted neighbours."""
        links: dict[int, set[int]] = {c.id: set() for c in federation.clients}
        for client in federation.clients:
            candidates = federation.topology.neighbours(client.id)
            size = min(self.num_peers, len(candidates))
            drawn = federation.rng.algorithm.choice(candidates, size=size, replace=False) if size else []
            for peer in drawn:
                links[client.id].add(int(peer))
                links[int(peer)].add(client.id)
        return {n: sorted(peers) for n, peers in links.items()}


def metropolis_weights(neighbours: dict[int, Sequence[int]]) -> np.ndarray:
    """Metropolis-Hastings mixing matrix of an undirected graph (``neighbours``: client -> its neighbours):
    ``w_ij = 1 / (1 + max(d_i, d_j))`` on a link, ``w_ii = 1 - sum_{j != i} w_ij``, 0 elsewhere. Symmetric and
    doubly stochastic, with non-negative entries."""
    import numpy as np

    n = len(neighbours)
    W = np.zeros((n, n))
    degree = {i: len(peers) for i, peers in neighbours.items()}
    for i, peers in neighbours.items():
        for j in peers:
            W[i, j] = 1.0 / (1.0 + max(degree[i], degree[j]))
        W[i, i] = 1.0 - W[i].sum()
    return W


def mix(states: Sequence[State], weights: Sequence[float]) -> State:
    """``sum_j w_j * state_j`` of every floating-point entry (accumulated in float64, stored in the entry's dtype);
    integer entries (BatchNorm's ``num_batches_tracked``) are the first state's, the receiver's own. The weights
    are used as given: a row of ``W``, summing to 1."""
    import torch

    out = {}
    for key, value in states[0].items():
        if value.is_floating_point():
            total = sum(float(w) * s[key].to(torch.float64) for s, w in zip(states, weights))
            out[key] = total.to(value.dtype)
        else:
            out[key] = value.clone()
    return out
