"""Serverless algorithms: a random aggregator per round, drawn by the previous one, plus random senders.

The shared transport lives here too: :meth:`DecentralizedAlgorithm.send` and
:meth:`DecentralizedAlgorithm.give_back` move models over the network through the ledger, which records the
traffic and applies the configured client faults (:class:`~lit_fl.federation.ledger.CommunicationLedger`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lit_fl.algorithms.base import Algorithm, nanmean
from lit_fl.algorithms.requirements import AGGREGATOR_AND_SENDERS
from lit_fl.constraints import Fraction, NonNegativeInt
from lit_fl.federation.selection import Participants, select_participants

if TYPE_CHECKING:
    from torch import Tensor, nn

    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.runner import StepRunner


@dataclass
class Gathering:
    """A round after selection, local training and sending: who is at the aggregator."""

    participants: Participants
    aggregator: Client
    senders: list[Client]  # the senders whose models arrived
    local_loss: float
    before: dict[int, dict[str, Tensor]]  # senders' weights, when returns can be lost

    @property
    def clients(self) -> list[Client]:
        return [self.aggregator, *self.senders]


class DecentralizedAlgorithm(Algorithm):
    """Adds aggregator/sender selection (DFML sec. 3.1) and fault-aware transport to :class:`Algorithm`.

    Args:
        sender_fraction: senders per round as a fraction of all clients, ``round(f * N)`` (DFML: 0.5);
            capped by the aggregator's number of neighbours on sparse topologies.
        fixed_aggregator: pin the aggregator to this client id every round (ablation, DFML A.4.2).
    """

    requires = (AGGREGATOR_AND_SENDERS,)

    def __init__(
        self, sender_fraction: Fraction = 0.5, fixed_aggregator: NonNegativeInt | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.sender_fraction = sender_fraction
        self.fixed_aggregator = fixed_aggregator
        self.previous_aggregator: int | None = None

    def select(self, round_: int, federation: Federation) -> Participants:
        """This round's aggregator and senders on the federation's topology."""
        participants = select_participants(
            round_,
            self.previous_aggregator,
            federation.num_clients,
            self.sender_fraction,
            federation.rng.selection,
            self.fixed_aggregator,
            federation.topology,
        )
        self.previous_aggregator = participants.aggregator
        return participants

    def gather(
        self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger
    ) -> Gathering:
        """The first half of a round shared by the aggregator-based methods: select, train every participant
        locally, senders send to the aggregator (faults apply), keep the senders' weights if returns can be
        lost."""
        participants = self.select(round_, federation)
        aggregator = federation.clients[participants.aggregator]
        selected = [federation.clients[n] for n in participants.senders]
        losses = self.local_phase([aggregator, *selected], federation, runner)
        senders = self.send(federation, ledger, aggregator, selected)
        before = self.snapshot_for_returns(federation, senders)
        return Gathering(participants, aggregator, senders, nanmean(losses), before)

    # -- transport --------------------------------------------------------------------------------------

    def send(
        self,
        federation: Federation,
        ledger: CommunicationLedger,
        receiver: Client,
        senders: Sequence[Client],
        models: Sequence[nn.Module] | None = None,
    ) -> list[Client]:
        """Senders transmit ``models`` (default: their regular models) to ``receiver``; returns the senders whose
        models arrived (a sender that fails, ``faults.drop_prob``, sends nothing: the ledger decides)."""
        arrived = []
        for i, sender in enumerate(senders):
            model = models[i] if models is not None else sender.model
            if ledger.send(sender.id, receiver.id, model, federation.topology.hops(sender.id, receiver.id)):
                arrived.append(sender)
        return arrived

    def give_back(
        self,
        federation: Federation,
        ledger: CommunicationLedger,
        sender: Client,
        receivers: Sequence[Client],
        before: dict[int, dict[str, Tensor]] | None = None,
        models: Sequence[nn.Module] | None = None,
        restore: Callable[[Client, dict[str, Tensor]], None] | None = None,
    ) -> list[Client]:
        """``sender`` returns updated ``models`` (default: the receivers' regular models, already updated in
        place). A lost return (``faults.return_drop_prob``) still costs traffic; that receiver's model is
        restored from ``before`` (its weights before the aggregator touched them) with ``restore`` (default:
        ``Client.set_weights`` of the regular model). Returns the receivers that got their model back."""
        from lit_fl.federation.state import Client

        delivered = []
        for i, receiver in enumerate(receivers):
            model = models[i] if models is not None else receiver.model
            if ledger.give_back(sender.id, receiver.id, model, federation.topology.hops(sender.id, receiver.id)):
                delivered.append(receiver)
                continue
            if before is None:
                raise RuntimeError("give_back needs the pre-aggregation weights when returns can be lost")
            (restore or Client.set_weights)(receiver, before[receiver.id])
        return delivered

    def snapshot_for_returns(
        self, federation: Federation, clients: Sequence[Client], models: Sequence[nn.Module] | None = None
    ) -> dict[int, dict[str, Tensor]]:
        """The clients' current weights (or those of ``models``), kept only when returns can be lost
        (restored by :meth:`give_back`)."""
        if federation.faults.return_drop_prob <= 0:
            return {}
        models = models if models is not None else [c.model for c in clients]
        return {c.id: {k: v.detach().clone() for k, v in m.state_dict().items()} for c, m in zip(clients, models)}

    def state_dict(self) -> dict[str, Any]:
        return {"previous_aggregator": self.previous_aggregator}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.previous_aggregator = state["previous_aggregator"]
