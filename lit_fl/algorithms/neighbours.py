"""The neighbour methods of the UA-PDFL comparison (papers/ua-pdfl.txt sec. 5.1.3-5.1.4) on the decentralized
round contract (:mod:`lit_fl.algorithms.peer`): every client trains every round and every client is a receiver,
each of the topology neighbours it draws (:meth:`NeighbourAlgorithm.peers`) sending to it ("each client serves
as a central server itself", sec. 5.1.3). The methods differ in the draw, in what travels and in how a client
combines it: DFedAvgM, CriticalFL (train, then combine), DisPFL, FedPer, UA-PDFL (combine, then train); a client
that draws no neighbour trains alone (:class:`~lit_fl.algorithms.local.Local`: nobody draws one).

They share UA-PDFL's training setup (sec. 4.1, 5.1.4): SGD with an initial lr of 0.05 decayed by 0.95 per round,
momentum 0.5, batch 50, one local epoch of cross-entropy, no weight decay (the paper names none).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from lit_fl import steps
from lit_fl.algorithms.base import RoundResult, nanmean
from lit_fl.algorithms.peer import PeerAlgorithm, PeerRound
from lit_fl.algorithms.settings import UAPDFL_CLIENTS
from lit_fl.constraints import Fraction
from lit_fl.steps.optim import SGDConfig

if TYPE_CHECKING:
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.phase import ClientWork
    from lit_fl.steps.runner import StepRunner


class NeighbourAlgorithm(PeerAlgorithm):
    """Every client trains and receives from the neighbours it draws (not registered).

    Args:
        lr_decay: per-round decay of the learning rate: round ``r`` (counted from 1) trains with
            ``lr * lr_decay ** (r - 1)``, so round 1 trains at the paper's "initial learning rate 0.05"
            (UA-PDFL sec. 4.1: initial lr 0.05, decay 0.95; SPEC: ``0.05 * 0.95^(round - 1)``); 1 keeps it
            constant.
    """

    client_defaults = UAPDFL_CLIENTS  # UA-PDFL sec. 4.1 and 5.1.4

    def __init__(self, lr_decay: Fraction = 0.95, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lr_decay = float(lr_decay)

    def round_lr(self, round_: int) -> float:
        """The learning rate of round ``round_`` (from 1): ``lr * lr_decay ** (round_ - 1)``."""
        return self.optimizer.lr * self.lr_decay ** (round_ - 1)

    def round_optimizer(self, round_: int) -> SGDConfig:
        """The (fresh) optimizer settings of every local phase of round ``round_``."""
        return replace(self.optimizer, lr=self.round_lr(round_))

    # -- the round's hooks ---------------------------------------------------------------------------------

    def plan(self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger) -> PeerRound:
        """Every client trains (at the round's lr, ``state["optimizer"]``) and receives from its :meth:`peers`."""
        optimizer = self.round_optimizer(round_)
        peers = self.peers(round_, federation, ledger)
        clients = federation.clients
        incoming = [(c, [clients[j] for j in peers.get(c.id, ())]) for c in clients]
        return PeerRound(round_, list(clients), incoming, draw=peers, state={"optimizer": optimizer})

    def peers(self, round_: int, federation: Federation, ledger: CommunicationLedger) -> dict[int, list[int]]:
        """Who sends to whom: every client's sources this round (default: nobody, every client trains alone)."""
        return {}

    def client_work(self, client: Client, plan: PeerRound, federation: Federation) -> ClientWork | None:
        """:meth:`local_step` at the round's lr for ``local_epochs`` epochs."""
        return self.work(client, self.local_step(client, plan.state["optimizer"]), federation, self.local_epochs)

    def local_step(self, client: Client, optimizer: SGDConfig) -> steps.LocalTraining:
        """Plain CE/WSM local training of the client's model."""
        return steps.LocalTraining(client.model, client.class_proportions, self.loss, optimizer)

    def round_result(self, plan: PeerRound, federation: Federation) -> RoundResult:
        """Every client took part; ``lr`` and the method's counters (``plan.extra``) go to the metric row."""
        return RoundResult(
            train_loss=nanmean(plan.losses),
            num_participants=federation.num_clients,
            extra={"lr": plan.state["optimizer"].lr, **{k: float(v) for k, v in plan.extra.items()}},
        )


def draw_neighbours(federation: Federation, sizes: Sequence[int]) -> dict[int, list[int]]:
    """Every client's ``min(sizes[i], #topology neighbours)`` distinct random neighbours, drawn from
    ``rng.algorithm`` in client order."""
    drawn: dict[int, list[int]] = {}
    for client in federation.clients:
        candidates = federation.topology.neighbours(client.id)
        size = min(sizes[client.id], len(candidates))
        chosen = federation.rng.algorithm.choice(candidates, size=size, replace=False) if size else []
        drawn[client.id] = [int(p) for p in chosen]
    return drawn


def data_sizes(federation: Federation, clients: Sequence[int]) -> list[float]:
    """``|D_u|`` weights of UA-PDFL's Algorithm 2 (train-split sizes); equal weights if all of them are empty."""
    sizes = [float(federation.clients[c].num_train) for c in clients]
    return sizes if sum(sizes) > 0 else [1.0] * len(sizes)
