"""Decentralized ``FedPer`` (Arivazhagan et al. 2019), the personalisation-layer baseline of UA-PDFL
(papers/ua-pdfl.txt sec. 5.1.3), and the peer-to-peer machinery it shares with :class:`~lit_fl.algorithms.UAPDFL`.

As in the UA-PDFL comparison, every client acts as its own server (sec. 5.1.3: "each client serves as a
central server itself, asynchronously collecting models from other clients", the pattern of Algorithm 2):
each round, every client draws ``N_com`` random peers among its topology neighbours, receives their
feature extractors ``g`` (weights as they were at the start of the round), replaces its own ``g`` by the
data-size weighted average over itself and the peers, keeps its own classifier ``h``, and trains locally.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lit_fl import steps
from lit_fl.algorithms.base import RoundResult, phase_losses
from lit_fl.algorithms.local import Local
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.requirements import ONE_ARCHITECTURE
from lit_fl.algorithms.unit_representation import ModelSplit
from lit_fl.constraints import PositiveInt

if TYPE_CHECKING:
    from torch import Tensor

    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.runner import StepRunner

    State = dict[str, Tensor]


@register_algorithm
class FedPer(Local):
    """Decentralized FedPer: average ``g`` over self + ``N_com`` peers (data-size weighted), keep own ``h``.

    All clients need the same architecture (a clear error says so otherwise). A peer that fails
    (``faults.drop_prob``) sends nothing that round.

    Args:
        num_peers: ``N_com``, peers each client receives from per round (UA-PDFL: 5); fewer when a client
            has fewer topology neighbours.
        classifier_modules: submodule names forming the personalised classifier ``h`` (everything else is
            ``g``); ``None`` = the final classifier block of the architecture (``classifier`` for lit-fl's
            CNN and ResNet18). E.g. ``[pre_logits, head]`` puts all fully connected layers of
            ``timm:vgg11`` in ``h``, as UA-PDFL sec. 5.1.1 does for VGG11.
        **kwargs: the training setup of :class:`Local` (lr 0.05 decayed 0.95 per round, momentum 0.5, ...).
    """

    #: UA-PDFL secs. 5.2-5.4 (Tables 1-5): final test accuracy averaged over clients, each on its own data
    reports = "local_acc"

    sequence_tasks = False  # its classifier split is defined for the image families

    requires = (ONE_ARCHITECTURE,)  # weights averaged whole between clients

    def __init__(self, num_peers: PositiveInt = 5, classifier_modules: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_peers = num_peers
        self.split = ModelSplit(classifier_modules)
        self.feature_keys: list[str] = []
        self.classifier_keys: list[str] = []

    def setup(self, federation: Federation) -> None:
        super().setup(federation)
        self.prepare(federation)

    def prepare(self, federation: Federation) -> None:
        """Split the keys of the clients' one architecture into ``g`` and ``h``."""
        self.feature_keys, self.classifier_keys = self.split.keys(federation.clients[0].model)

    def run_round(
        self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger
    ) -> RoundResult:
        if not self.feature_keys:
            self.prepare(federation)
        snapshot = snapshot_states(federation)
        queues = self.draw_queues(federation, ledger)
        for client in federation.clients:
            peers = queues[client.id]
            if not peers:
                continue
            for peer in peers:
                self.receive(ledger, peer, client, snapshot[peer], self.feature_keys)
            client.set_weights(self.merge(federation, snapshot, client, [client.id, *peers], [client.id]))
        optimizer = self.round_optimizer(round_)
        works = [self.work(c, self.local_step(c, optimizer), federation, self.local_epochs) for c in federation.clients]
        return self.round_result(federation, phase_losses(runner.run_phase(works)), optimizer)

    # -- peer-to-peer machinery shared with UA-PDFL -----------------------------------------------------------

    def draw_queues(self, federation: Federation, ledger: CommunicationLedger) -> dict[int, list[int]]:
        """Queue ``Q_i`` of every client: ``min(N_com, #neighbours)`` distinct random neighbours, drawn from
        ``rng.algorithm`` in client order; peers that do not reach the client this round (the ledger's
        ``faults.drop_prob``) are left out."""
        queues: dict[int, list[int]] = {}
        for client in federation.clients:
            neighbours = federation.topology.neighbours(client.id)
            size = min(self.num_peers, len(neighbours))
            drawn = federation.rng.algorithm.choice(neighbours, size=size, replace=False) if size else []
            queues[client.id] = [int(p) for p in drawn if ledger.reaches(int(p), client.id)]
        return queues

    def receive(
        self, ledger: CommunicationLedger, peer: int, client: Client, state: State, keys: Sequence[str]
    ) -> None:
        """``peer`` sends the entries ``keys`` of its (round-start) weights to ``client``: ledger traffic."""
        from lit_fl.federation.ledger import Payload

        ledger.send(peer, client.id, Payload([state[k] for k in keys]))

    def merge(
        self,
        federation: Federation,
        snapshot: dict[int, State],
        client: Client,
        feature_sources: Sequence[int],
        classifier_sources: Sequence[int],
    ) -> State:
        """The client's new weights: ``g`` = data-size weighted average of ``feature_sources``' round-start
        ``g`` (Algorithm 2 line 20), ``h`` = the same over ``classifier_sources`` (line 21)."""
        state = dict(snapshot[client.id])
        for keys, sources in ((self.feature_keys, feature_sources), (self.classifier_keys, classifier_sources)):
            if list(sources) == [client.id]:
                continue
            weights = data_sizes(federation, sources)
            state.update(steps.weighted_average([{k: snapshot[s][k] for k in keys} for s in sources], weights))
        return state


def snapshot_states(federation: Federation) -> dict[int, State]:
    """Every client's weights at the start of the round (detached copies), so that models replaced or
    averaged earlier in the round are never read by a later client (no chaining)."""
    return {c.id: {k: v.detach().clone() for k, v in c.model.state_dict().items()} for c in federation.clients}


def data_sizes(federation: Federation, clients: Sequence[int]) -> list[float]:
    """``|D_u|`` weights of Algorithm 2 (train-split sizes); equal weights if all of them are empty."""
    sizes = [float(federation.clients[c].num_train) for c in clients]
    return sizes if sum(sizes) > 0 else [1.0] * len(sizes)
