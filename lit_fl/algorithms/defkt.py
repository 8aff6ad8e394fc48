"""Def-KT: decentralized FL via mutual knowledge transfer (papers/def-kt.txt, Algorithm 1, Eq. 1-8).

:class:`PairwiseExchange` holds the round Def-KT shares with its baselines FullAvg and Combo (Algorithms 2
and 3, in :mod:`lit_fl.algorithms.fullavg_combo`): Q senders train locally and each sends to a distinct
receiver; only the fusion at the receiver differs.
"""

from __future__ import annotations

import copy
from abc import abstractmethod
from typing import TYPE_CHECKING, Any

import numpy as np

from lit_fl import steps
from lit_fl.algorithms.base import RoundResult, nanmean
from lit_fl.algorithms.decentralized import DecentralizedAlgorithm
from lit_fl.algorithms.peer import PeerAlgorithm, PeerRound
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.requirements import ONE_ARCHITECTURE
from lit_fl.algorithms.settings import DFML_CLIENTS
from lit_fl.constraints import NonNegativeFloat, NonNegativeInt
from lit_fl.errors import ConfigError
from lit_fl.federation.selection import num_senders

if TYPE_CHECKING:
    from collections.abc import Sequence

    from torch import nn

    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.federation.topology import Topology
    from lit_fl.steps.phase import ClientWork
    from lit_fl.steps.runner import StepRunner


def draw_pairs(
    num_pairs: int, topology: Topology, sender_rng: np.random.Generator, receiver_rng: np.random.Generator
) -> list[tuple[int, int]]:
    """Up to ``num_pairs`` (sender, receiver) pairs of 2Q distinct clients, each receiver a neighbour of its
    sender; sorted by sender id.

    Clients are visited in a random order (``sender_rng``); a client not yet used becomes a sender when one
    of its neighbours is still free, and its receiver is drawn uniformly among those free neighbours
    (``receiver_rng``). On a mesh this is Def-KT's draw (Algorithm 1: a random set I^A of Q senders, another
    disjoint random set I^B of Q receivers, randomly matched). On a sparse topology (ring, regular, two-group)
    a client with no free neighbour is skipped, so a round can form fewer than Q pairs (logged as
    ``fused_pairs``/``num_receivers``); a model never crosses a missing link.
    """
    n = topology.num_clients
    used = np.zeros(n, dtype=bool)
    pairs: list[tuple[int, int]] = []
    for sender in sender_rng.permutation(n):
        if len(pairs) >= num_pairs:
            break
        if used[sender]:
            continue
        neighbours = topology.neighbours(int(sender))
        free = neighbours[~used[neighbours]]
        if len(free) == 0:
            continue
        receiver = int(receiver_rng.choice(free))
        used[sender] = used[receiver] = True
        pairs.append((int(sender), receiver))
    return sorted(pairs)


class PairwiseExchange(DecentralizedAlgorithm):
    """The round of Def-KT Algorithms 1-3: no aggregator; ``Q = round(sender_fraction * N)`` (at most
    ``N // 2``) senders drawn with ``federation.rng.selection``, each paired with a distinct receiver drawn
    with ``federation.rng.algorithm`` (:func:`draw_pairs`); the senders train locally (``local_epochs`` of
    ``loss``, Eq. 1) and send (:meth:`outgoing`) to their receivers; each pair then runs :meth:`fuse`.

    A sender that fails (``faults.drop_prob``) keeps its locally trained model and its receiver does
    nothing. All clients must share one architecture (the papers' setting: every client starts from the
    same ``w_0``; DFML sec. 2 notes Def-KT supports homogeneous models only).

    Args:
        loss: ``wsm`` (the DFML paper re-runs Def-KT, FullAvg and Combo with WSM, sec. 4) or ``ce`` (Def-KT Eq. 7).
    """

    #: Whether :meth:`fuse` returns a training loss worth logging as ``fusion_loss``.
    logs_fusion_loss: bool = False
    client_defaults = DFML_CLIENTS  # WSM, as DFML
    requires = (*DecentralizedAlgorithm.requires, ONE_ARCHITECTURE)  # every client starts from the same w_0

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if self.fixed_aggregator is not None:
            raise ConfigError(f"algorithm.fixed_aggregator: {self.name} has no aggregator; leave it unset")

    def num_pairs(self, num_clients: int) -> int:
        """``Q = round(sender_fraction * N)``, capped at ``N // 2`` so that 2Q clients are distinct."""
        return min(num_senders(num_clients, self.sender_fraction), num_clients // 2)

    #: the pairs are drawn among every client (Def-KT's Algorithm 1), not among those there
    selects_available = False

    def plan(self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger) -> PeerRound:
        """The round's pairs (:func:`draw_pairs`): the senders train, each receiver receives from its sender."""
        pairs = draw_pairs(
            self.num_pairs(federation.num_clients),
            federation.topology,
            federation.rng.selection,
            federation.rng.algorithm,
        )
        clients = federation.clients
        incoming = [(clients[r], [clients[s]]) for s, r in pairs]
        return PeerRound(round_, [clients[s] for s, _ in pairs], incoming, draw=pairs)

    def exchange(self, receiver: Client, sources: Sequence[Client], plan: PeerRound, federation: Federation,
                 ledger: CommunicationLedger) -> list[Client]:
        """The sender transmits its :meth:`outgoing` (no model comes back: nothing kept for returns)."""
        return PeerAlgorithm.exchange(self, receiver, sources, plan, federation, ledger)

    def combine(self, receiver: Client, arrived: list[Client], plan: PeerRound, federation: Federation,
                runner: StepRunner, ledger: CommunicationLedger) -> ClientWork | None:
        """The receiver fuses what arrived from its sender (:meth:`fuse`; nothing when the sender failed)."""
        return self.fuse(arrived[0], receiver, federation, ledger) if arrived else None

    def send_back(self, receiver: Client, plan: PeerRound, federation: Federation,
                  ledger: CommunicationLedger) -> None:
        """Nothing goes back at the pair's end (Combo's :meth:`fuse` swaps a segment with the sender itself)."""

    def round_result(self, plan: PeerRound, federation: Federation) -> RoundResult:
        pairs = plan.draw
        extra = {
            "fused_pairs": float(sum(1 for receiver, _ in plan.incoming if plan.arrived[receiver.id])),
            "num_receivers": float(len(pairs)),
        }
        if self.logs_fusion_loss:
            extra["fusion_loss"] = nanmean(plan.combine_losses)
        return RoundResult(
            aggregator=None,
            senders=tuple(s for s, _ in pairs),
            train_loss=nanmean(plan.losses),
            num_participants=2 * len(pairs),  # every pair is two participants (Algorithm 1: 2Q)
            extra=extra,
        )

    def outgoing(self, source: Client, receiver: Client, plan: PeerRound) -> nn.Module:
        """What the sender transmits (recorded in the ledger): its locally trained model."""
        return source.model

    @abstractmethod
    def fuse(
        self, sender: Client, receiver: Client, federation: Federation, ledger: CommunicationLedger
    ) -> ClientWork | None:
        """Fuse the model that arrived from ``sender`` at ``receiver``: what can be done at once is done here, the
        receiver's training (if any) is returned as its work in the round's fusion phase."""


@register_algorithm
class DefKT(PairwiseExchange):
    """Def-KT (Algorithm 1): the receiver runs ``fusion_epochs`` (E) epochs of deep mutual learning (Eq. 2-8,
    :class:`DeepMutualLearning`) between a copy of the received model ``w~`` and its own model ``w`` on its
    own train split, both updated per batch from predictions computed before either update, then stores the
    updated ``w~`` as its model (its own updated ``w`` is discarded). Senders keep their locally trained
    models; nothing is sent back (Q model transfers per round).

    The supervised term is ``loss``: ``ce`` as in the Def-KT paper (Eq. 7), or ``wsm`` with the receiver's
    class proportions (default; the DFML paper's comparison, SPEC). Paper settings: E = 1 (sec. IV.C);
    Q = 1 of K = 10 clients (``sender_fraction: 0.1``) in the Def-KT paper, 25 senders + 25 receivers of 50
    in the DFML comparison (``sender_fraction: 0.5``). The Def-KT paper's optimizer is SGD with momentum 0.5
    and no weight decay (``momentum: 0.5, weight_decay: 0``); the defaults follow the DFML comparison.

    Args:
        fusion_epochs: E, epochs of mutual learning over the receiver's data (Def-KT: 1). With 0, or a
            receiver without training data, the receiver simply stores the received model.
        kl_weight: weight of the KL terms of Eq. 5-6 (1).
    """

    #: Def-KT sec. IV-C (Figs. 4-6 a-c): averaged global accuracy of all clients' models (local_acc: Figs. d)
    reports = "global_acc"

    logs_fusion_loss = True

    def __init__(self, fusion_epochs: NonNegativeInt = 1, kl_weight: NonNegativeFloat = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fusion_epochs = fusion_epochs
        self.kl_weight = float(kl_weight)

    def fuse(
        self, sender: Client, receiver: Client, federation: Federation, ledger: CommunicationLedger
    ) -> ClientWork | None:
        """The receiver stores ``w~`` as its model at once (Algorithm 1) and its fusion work trains it in place by
        deep mutual learning with a copy of the receiver's own model ``w`` (discarded afterwards)."""
        own = copy.deepcopy(receiver.model)
        receiver.set_weights(sender.model.state_dict())  # "store w~ as the local model": it trains in place
        step = steps.DeepMutualLearning(
            receiver.model,
            own,
            receiver.class_proportions,
            loss=self.loss,
            kl_weight=self.kl_weight,
            optimizer=self.optimizer,
        )
        return self.work(receiver, step, federation, self.fusion_epochs)
