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
from lit_fl.algorithms.neighbours import NeighbourAlgorithm, data_sizes, draw_neighbours
from lit_fl.algorithms.peer import PeerRound, snapshot_states
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.requirements import ONE_ARCHITECTURE
from lit_fl.algorithms.unit_representation import ModelSplit
from lit_fl.constraints import PositiveInt

if TYPE_CHECKING:
    from torch import Tensor, nn

    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.runner import StepRunner

    State = dict[str, Tensor]


@register_algorithm
class FedPer(NeighbourAlgorithm):
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
        **kwargs: UA-PDFL's training setup of :class:`~lit_fl.algorithms.neighbours.NeighbourAlgorithm` (lr 0.05
            decayed 0.95 per round, momentum 0.5, ...).
    """

    #: UA-PDFL secs. 5.2-5.4 (Tables 1-5): final test accuracy averaged over clients, each on its own data
    reports = "local_acc"

    sequence_tasks = False  # its classifier split is defined for the image families

    requires = (ONE_ARCHITECTURE,)  # weights averaged whole between clients
    trains_first = False  # the round-start weights travel; the combined model trains

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

    # -- the round: the round-start weights of the reachable peers, combined, then local training -------------

    def plan(self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger) -> PeerRound:
        """The round-start weights (``state["snapshot"]``: no chaining) and every client's queue
        (:meth:`draw_queues`)."""
        if not self.feature_keys:
            self.prepare(federation)
        snapshot = snapshot_states(federation)
        plan = super().plan(round_, federation, runner, ledger)
        plan.state["snapshot"] = snapshot
        return plan

    def peers(self, round_: int, federation: Federation, ledger: CommunicationLedger) -> dict[int, list[int]]:
        return self.draw_queues(federation, ledger)

    def outgoing(self, source: Client, receiver: Client, plan: PeerRound) -> nn.Module:
        """A peer sends the entries of ``g`` of its round-start weights."""
        return payload(plan.state["snapshot"][source.id], self.feature_keys)

    def combine(self, receiver: Client, arrived: list[Client], plan: PeerRound, federation: Federation,
                runner: StepRunner, ledger: CommunicationLedger) -> None:
        """``g``: the data-size weighted average over the client and its peers; ``h``: the client's own."""
        if arrived:
            peers = [c.id for c in arrived]
            receiver.set_weights(self.merge(federation, plan.state["snapshot"], receiver, [receiver.id, *peers],
                                            [receiver.id]))

    # -- peer-to-peer machinery shared with UA-PDFL -----------------------------------------------------------

    def draw_queues(self, federation: Federation, ledger: CommunicationLedger) -> dict[int, list[int]]:
        """Queue ``Q_i`` of every client: ``min(N_com, #neighbours)`` distinct random neighbours, drawn from
        ``rng.algorithm`` in client order; peers that do not reach the client this round (the ledger's
        ``faults.drop_prob``) are left out."""
        drawn = draw_neighbours(federation, [self.num_peers] * federation.num_clients)
        return {i: [p for p in peers if ledger.reaches(p, i)] for i, peers in drawn.items()}

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


def payload(state: State, keys: Sequence[str]) -> nn.Module:
    """The entries ``keys`` of a client's weights, as they travel (ledger traffic)."""
    from lit_fl.federation.ledger import Payload

    return Payload([state[k] for k in keys])
