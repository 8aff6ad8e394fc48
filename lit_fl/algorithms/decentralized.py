"""The aggregator-based serverless methods: a random aggregator per round, drawn by the previous one, plus random
senders (DFML sec. 3.1), on the decentralized round contract (:mod:`lit_fl.algorithms.peer`).

The round's draw is the aggregator and its senders; every participant trains locally, the senders send to the
aggregator (one receiver), the aggregator combines (DFML's mutual learning, FedAvg's Eq. 5, FML's memes) and
returns the updated models to the senders whose models arrived (:meth:`DecentralizedAlgorithm.send_back`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from lit_fl.algorithms.base import RoundResult, nanmean
from lit_fl.algorithms.peer import PeerAlgorithm, PeerRound
from lit_fl.algorithms.requirements import AGGREGATOR_AND_SENDERS
from lit_fl.constraints import Fraction, NonNegativeInt
from lit_fl.federation.selection import Participants, available_clients, select_participants

if TYPE_CHECKING:
    from collections.abc import Sequence

    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.runner import StepRunner


class DecentralizedAlgorithm(PeerAlgorithm):
    """The round of :class:`PeerAlgorithm` with DFML's aggregator/sender selection (DFML sec. 3.1).

    Args:
        sender_fraction: senders per round as a fraction of all clients, ``round(f * N)`` (DFML: 0.5);
            capped by the aggregator's number of neighbours on sparse topologies.
        fixed_aggregator: pin the aggregator to this client id every round (ablation, DFML A.4.2).
    """

    requires = (AGGREGATOR_AND_SENDERS,)
    #: Whether ``privacy.level user`` can privatise the method's exchanges (:mod:`lit_fl.privacy.exchange`): every
    #: sender's model is released clipped and noised (:meth:`exchange`); the method releases what else leaves a
    #: client (an aggregator's own model mixed into what it returns, its returns) and calls :meth:`settle`.
    exchange_dp: ClassVar[bool] = False
    #: the aggregator and senders are drawn among the clients there (:meth:`select`)
    selects_available: ClassVar[bool] = True

    def __init__(
        self, sender_fraction: Fraction = 0.5, fixed_aggregator: NonNegativeInt | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.sender_fraction = sender_fraction
        self.fixed_aggregator = fixed_aggregator
        self.previous_aggregator: int | None = None

    def select(self, round_: int, federation: Federation) -> Participants | None:
        """This round's aggregator and senders on the federation's topology, among the clients there at the round's
        start on the virtual clock (``system.availability_trace``); None when nobody can aggregate."""
        participants = select_participants(
            round_,
            self.previous_aggregator,
            federation.num_clients,
            self.sender_fraction,
            federation.rng.selection,
            self.fixed_aggregator,
            federation.topology,
            available_clients(federation),
        )
        if participants is not None:
            self.previous_aggregator = participants.aggregator
        return participants

    def plan(self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger) -> PeerRound:
        """:meth:`select`'s participants train (the aggregator first); the aggregator receives from the senders.
        Nobody there: an empty round (nothing trains, nothing travels)."""
        participants = self.select(round_, federation)
        if participants is None:
            return PeerRound(round_, [], [], draw=None)
        aggregator = federation.clients[participants.aggregator]
        senders = [federation.clients[n] for n in participants.senders]
        return PeerRound(round_, [aggregator, *senders], [(aggregator, senders)], draw=participants)

    def exchange(self, receiver: Client, sources: Sequence[Client], plan: PeerRound, federation: Federation,
                 ledger: CommunicationLedger) -> list[Client]:
        """The senders send to the aggregator; what arrived is kept as it was (``plan.state["before"]``) when
        returns can be lost (:meth:`send_back` restores it)."""
        arrived = super().exchange(receiver, sources, plan, federation, ledger)
        models = [self.outgoing(s, receiver, plan) for s in arrived]
        plan.state["before"] = self.snapshot_for_returns(federation, arrived, models)
        if federation.exchange_privacy is not None:
            plan.state["own"], plan.state["sent"] = release_senders(federation, arrived)
        return arrived

    def send_back(self, receiver: Client, plan: PeerRound, federation: Federation,
                  ledger: CommunicationLedger) -> None:
        """The aggregator returns their updated models to the senders whose models arrived."""
        delivered = self.give_back(federation, ledger, receiver, plan.arrived[receiver.id], plan.state["before"])
        self.settle(receiver, plan, federation, delivered)

    def settle(self, receiver: Client, plan: PeerRound, federation: Federation, returned: Sequence[Client]) -> None:
        """Under DP on the exchanges: a sender that got a model back (built from releases alone) adopts it as its
        public reference; one that did not gets its own weights back (its release left it, not its model)."""
        if federation.exchange_privacy is None:
            return
        from lit_fl.privacy.exchange import adopt

        back = {c.id for c in returned}
        for sender in plan.arrived[receiver.id]:
            if sender.id in back:
                adopt(federation.privacy_state, sender.id, sender.model)
            else:
                sender.set_weights(plan.state["own"][sender.id])

    def round_result(self, plan: PeerRound, federation: Federation) -> RoundResult:
        if plan.draw is None:  # nobody was there
            return RoundResult(train_loss=nanmean(plan.losses), extra=plan.extra)
        return RoundResult(
            aggregator=plan.draw.aggregator,
            senders=plan.draw.senders,
            train_loss=nanmean(plan.losses),
            extra=plan.extra,
        )

    def state_dict(self) -> dict[str, Any]:
        return {"previous_aggregator": self.previous_aggregator}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.previous_aggregator = state["previous_aggregator"]


def release_senders(federation: Federation, senders: Sequence[Client]) -> tuple[dict[int, Any], dict[int, Any]]:
    """Every sender's model released (:func:`lit_fl.privacy.exchange.released`) in place of its own weights, for
    the receiver to use; their own weights and the released ones, by client id."""
    from lit_fl.privacy.exchange import released

    assert federation.exchange_privacy is not None and federation.privacy_state is not None
    own, sent = {}, {}
    for sender in senders:
        own[sender.id] = {k: v.detach().clone() for k, v in sender.model.state_dict().items()}
        sent[sender.id] = released(federation.exchange_privacy, federation.privacy_state, sender.id, own[sender.id])
        sender.set_weights(sent[sender.id])
    return own, sent
