"""FedAvg with a central server (McMahan, Moore, Ramage, Hampson, Agüera y Arcas, AISTATS 2017, arXiv 1602.05629),
Algorithm 1 (FederatedAveraging); docs/baselines.md "ServerFedAvg". lit-fl's ``DecentralizedFedAvg`` is DFML's
serverless variant; this is the paper's.

The server holds the model ``w`` (``federation.server["global"]``, evaluated as ``server_acc/global``). Each round
(Algorithm 1, server side):

1. ``S_t``: ``m = round(client_fraction * K)`` clients (at least 1) drawn from ``federation.rng.selection``.
2. The server sends ``w_t`` to every client of ``S_t``: ledger ``give_back(-1, k, ...)`` of the model.
3. ClientUpdate(k, w_t): ``w <- w_t``; ``local_epochs`` epochs (E) of mini-batch SGD (batch B = ``batch_size``,
   step ``lr``, SGD momentum and weight decay as configured) on the client's data, :class:`~lit_fl.steps.
   LocalTraining` through ``runner.run_phase`` (it fuses under ``trainer.fuse on``).
4. The client sends ``w^k_{t+1}`` back (ledger ``send(k, -1, ...)``).
5. ``w_{t+1} = sum_{k in S_t} n_k / m_t w^k_{t+1}``, ``m_t = sum_{k in S_t} n_k`` (the weighted average of
   Algorithm 1 over the clients whose models arrived), buffers included (BatchNorm running statistics averaged the
   same way; integer counters from the first client, :func:`~lit_fl.steps.weighted_average`).

A client whose model is lost on the way down or up (``faults.*``), or without training data, sends nothing and is
left out of the average; the clients not sampled keep their models.

Defaults: FedORION's shared setting (papers/fedorion.txt sec. 4.1 and appendix D, Table 3, where FedAvg is a
homogeneous baseline): SGD momentum 0.9, no weight decay, client lr 0.01, batch 32, 10 local epochs, 30% of the
clients per round (sec. 4.2.1).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from lit_fl import steps
from lit_fl.algorithms.base import Algorithm, RoundResult, nanmean, phase_losses
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.choices import SupervisedLoss
from lit_fl.constraints import Fraction
from lit_fl.errors import ConfigError
from lit_fl.federation.selection import select_fraction

if TYPE_CHECKING:
    from torch import Tensor

    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Federation
    from lit_fl.steps.phase import ClientWork
    from lit_fl.steps.runner import StepRunner

GLOBAL = "global"


@register_algorithm
class ServerFedAvg(Algorithm):
    """FedAvg (McMahan et al. 2017, Algorithm 1) with a central server; every client of the one architecture starts
    from the same initialisation, and the server model from it too.

    Args:
        client_fraction: C, the share of the clients sampled each round, ``m = round(C * K)`` (at least 1).
            FedORION's shared setting: 0.3 (sec. 4.2.1).
        local_epochs: E, epochs of local SGD per round (FedORION sec. 4.2.1: 10).
        loss: the clients' supervised loss (``ce``).
        lr: the clients' learning rate (FedORION sec. 4.1: 0.01).
        momentum: the clients' SGD momentum (FedORION sec. 4.1: 0.9; the paper's ClientUpdate is plain SGD).
        weight_decay: the clients' SGD weight decay (FedORION names none: 0).
        batch_size: B, the clients' batch size (FedORION sec. 4.1: 32).
    """

    #: FedORION App. D (Table 3) and DFML App. A.4.1 (Fig. 12): the server's global model on the test set
    reports = "server_acc/global"

    sequence_tasks = True  # learns from logits alone: runs on token sequences (lit_fl.data.tokens)

    def __init__(
        self,
        client_fraction: Fraction = 0.3,
        local_epochs: int = 10,
        loss: SupervisedLoss = "ce",
        lr: float = 0.01,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        batch_size: int = 32,
    ) -> None:
        super().__init__(local_epochs=local_epochs, loss=loss, lr=lr, momentum=momentum, weight_decay=weight_decay,
                         batch_size=batch_size)
        self.client_fraction = client_fraction

    # -- setup -------------------------------------------------------------------------------------------

    def setup(self, federation: Federation) -> None:
        """Check the federation (one architecture, a mesh) and create the server model from the clients'
        initialisation."""
        if federation.topology.name != "mesh":
            raise ConfigError(
                f"topology.name: {self.name} is server based (every client reaches the server); "
                f"{federation.topology.name!r} is not allowed; allowed: mesh"
            )
        archs = federation.architectures()
        if len(archs) != 1:
            raise ConfigError(f"models.pool: {self.name} averages one architecture (homogeneous models), got {archs}")
        if GLOBAL not in federation.server:
            federation.server[GLOBAL] = copy.deepcopy(federation.clients[0].regular_model)

    # -- round -------------------------------------------------------------------------------------------

    def select(self, federation: Federation) -> list[int]:
        """``round(client_fraction * N)`` distinct clients (at least one), sorted."""
        return select_fraction(federation, self.client_fraction)

    def run_round(
        self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger
    ) -> RoundResult:
        server = federation.server[GLOBAL]
        selected = self.select(federation)
        w_state = {k: v.detach().clone() for k, v in server.state_dict().items()}

        works: list[ClientWork | None] = []
        for cid in selected:
            client = federation.clients[cid]
            if ledger.give_back(-1, cid, server):  # w_t down
                client.set_weights(w_state)  # ClientUpdate starts at w_t
                works.append(self.local_work(client, federation))  # E epochs (+ the subclass's local terms)
            else:
                works.append(None)
        losses = phase_losses(runner.run_phase(works))

        arrived: list[int] = []
        states: list[dict[str, Tensor]] = []
        sizes: list[float] = []
        for cid, work in zip(selected, works):
            if work is None:
                continue
            client = federation.clients[cid]
            if not ledger.send(cid, -1, client.model):  # w^k_{t+1} up
                continue
            arrived.append(cid)
            states.append({k: v.detach() for k, v in client.model.state_dict().items()})
            sizes.append(float(client.num_train))  # n_k

        if arrived:
            state = steps.weighted_average(states, sizes)  # sum_k n_k / m_t w^k
            steps.load_weights(server, {k: state[k].to(v.dtype) for k, v in w_state.items()})
        return RoundResult(senders=tuple(arrived), train_loss=nanmean(losses))
