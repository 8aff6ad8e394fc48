"""Decentralized FedAvg (papers/dfml.txt A.3.1, Algorithm 2, Eq. 5)."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from lit_fl import steps
from lit_fl.algorithms.decentralized import DecentralizedAlgorithm, release_senders
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.settings import DFML_CLIENTS

if TYPE_CHECKING:
    from lit_fl.algorithms.peer import PeerRound
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.runner import StepRunner


@register_algorithm
class DecentralizedFedAvg(DecentralizedAlgorithm):
    """Participants train locally; at the aggregator, models of the same architecture are averaged weighted
    by train-set size (Eq. 5) and every participant receives its cluster's average. Clients of an
    architecture start from the same initialisation (the experiment builder guarantees it).

    Args:
        loss: ``wsm`` (DFML sec. 4 runs every baseline with WSM, as DFML itself) or ``ce``.
    """

    #: DFML sec. 4.4 (Tables 3-9): decentralized FedAvg's global accuracy, its clients' models on the test set
    reports = "global_acc"

    sequence_tasks = True  # learns from logits alone: runs on token sequences (lit_fl.data.tokens)
    client_defaults = DFML_CLIENTS  # WSM, as DFML
    sample_level_dp = True  # its one client phase is LocalTraining: DP-SGD can take it
    exchange_dp = True  # every model it averages is a release: privacy.level user clips and noises them

    def combine(self, receiver: Client, arrived: list[Client], plan: PeerRound, federation: Federation,
                runner: StepRunner, ledger: CommunicationLedger) -> None:
        """The aggregator averages the models that reached it (:meth:`aggregate`). Under DP on the exchanges its
        own model enters an average it returns only as a release, and it adopts that average."""
        private = federation.exchange_privacy is not None and any(c.arch == receiver.arch for c in arrived)
        if private:
            release_senders(federation, [receiver])
        self.aggregate(plan.round, federation, [receiver, *arrived])
        if private:
            from lit_fl.privacy.exchange import adopt

            adopt(federation.privacy_state, receiver.id, receiver.model)

    def aggregate(self, round_: int, federation: Federation, clients: list[Client]) -> None:
        """At the aggregator: every same-architecture cluster of ``clients`` gets its Eq. 5 average."""
        for cluster in clusters_by_architecture(clients).values():
            average_cluster(cluster)


def clusters_by_architecture(clients: list[Client]) -> dict[str, list[Client]]:
    """Participants grouped by architecture, in order of first appearance."""
    clusters: dict[str, list[Client]] = defaultdict(list)
    for client in clients:
        clusters[client.arch].append(client)
    return dict(clusters)


def average_cluster(cluster: list[Client]) -> None:
    """Replace every model of one same-architecture cluster by the sample-weighted average (Eq. 5)."""
    from lit_fl.federation.state import WeightsToken

    if len(cluster) < 2:
        return
    average = steps.weighted_average([c.model.state_dict() for c in cluster], [c.num_train for c in cluster])
    token = WeightsToken()  # one average, many holders: evaluated once
    for client in cluster:
        client.set_weights(average, token)
