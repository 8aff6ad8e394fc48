"""D-PSGD (Lian et al. 2017, "Can decentralized algorithms outperform centralized algorithms?"), written as a
method of your own on lit-fl: every client trains on its own data, then averages its weights with the models that
arrive from its topology neighbours (gossip). No lit-fl file is edited; run it from this folder:

    lit-fl fit --config gossip.yaml                       # one run
    lit-fl sweep gossip_sweep.yaml --jobs 2               # against decentralized FedAvg, with and without faults
    lit-fl compare runs/sweeps/gossip_sweep               # the dashboard

See docs/extending.md for the round contract this file follows.
"""

from __future__ import annotations

from typing import Any

from lit_fl.algorithms import Algorithm, RoundResult
from lit_fl.algorithms.base import nanmean
from lit_fl.errors import ConfigError
from lit_fl.steps import weighted_average


class Gossip(Algorithm):
    """D-PSGD: local SGD, then uniform averaging with the neighbours whose models arrived this round.

    Args:
        self_weight: the weight of a client's own model in its average, the rest shared equally by the arrived
            neighbours' models (D-PSGD's mixing matrix row; 0.5 by default). A client whose neighbours all failed
            keeps its own model.
        **kwargs: client training (``local_epochs``, ``loss``, ``lr``, ... of :class:`~lit_fl.algorithms.Algorithm`).
    """

    def __init__(self, self_weight: float = 0.5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not 0.0 <= self_weight < 1.0:
            raise ConfigError(f"algorithm.self_weight must be in [0, 1), got {self_weight}")
        self.self_weight = self_weight

    def setup(self, federation: Any) -> None:
        """Averaging weights needs one architecture for every client."""
        super().setup(federation)
        if len(federation.architectures()) > 1:
            raise ConfigError(f"models.pool: Gossip averages weights, so every client needs the same architecture; "
                              f"got {', '.join(federation.architectures())}")

    def run_round(self, round_: int, federation: Any, runner: Any, ledger: Any) -> RoundResult:
        # 1. every client trains on its own data: one work per client, run by lit-fl's phase runner (batched and
        #    fused on a GPU, placed on processes with --trainer.devices N); local_work is the hook to override
        works = [self.local_work(client, federation) for client in federation.clients]
        losses = [result.loss for result in runner.run_phase(works)]
        # 2. the models as sent: every client reads its neighbours' trained models, never an average of this round
        sent = {c.id: {k: v.detach().clone() for k, v in c.model.state_dict().items()} for c in federation.clients}
        # 3. gossip: each neighbour sends its model through the ledger (which counts the MB and applies faults.*)
        for client in federation.clients:
            neighbours = federation.topology.neighbours(client.id)
            arrived = [n for n in neighbours if ledger.send(n, client.id, federation.clients[n].model)]
            if arrived:
                share = (1.0 - self.self_weight) / len(arrived)
                states = [sent[client.id], *(sent[n] for n in arrived)]
                client.set_weights(weighted_average(states, [self.self_weight] + [share] * len(arrived)))
        return RoundResult(senders=tuple(c.id for c in federation.clients), train_loss=nanmean(losses))
