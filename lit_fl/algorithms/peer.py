"""The decentralized round contract: every serverless method's round is

    select -> client work (one phase, :meth:`StepRunner.run_phase`) -> exchange over the topology -> combine
    -> send back

:meth:`PeerAlgorithm.run_round` runs it; a method overrides only the hooks its paper changes:

* :meth:`~PeerAlgorithm.plan`: the round's draw, as a :class:`PeerRound`: who works in the client phase
  (``trainees``) and, for every receiver in exchange order, the clients it receives from (``incoming``). The
  aggregator methods draw one aggregator and its senders
  (:class:`~lit_fl.algorithms.decentralized.DecentralizedAlgorithm`, DFML sec. 3.1) or sender-receiver pairs
  (Def-KT); the neighbour methods let every client receive from topology neighbours it draws
  (:class:`~lit_fl.algorithms.neighbours.NeighbourAlgorithm`: DFedAvgM, CriticalFL, DisPFL, FedPer, UA-PDFL; with
  no neighbour at all, :class:`~lit_fl.algorithms.local.Local`);
* :meth:`~PeerAlgorithm.client_phase`: the trainees' work, one phase (default: :meth:`client_work` of each, which is
  :meth:`~lit_fl.algorithms.base.Algorithm.local_work`); it runs before the exchange (``trains_first``: the
  trained models travel, adapt-then-combine) or after the combination (``trains_first = False``: the round-start
  models travel and the combined model trains, combine-then-adapt: DisPFL, FedPer, UA-PDFL);
* :meth:`~PeerAlgorithm.exchange`: one receiver's transfers, every source's :meth:`outgoing` through the ledger
  (:meth:`send`: traffic counted, faults applied); returns the sources whose transfer arrived;
* :meth:`~PeerAlgorithm.combine`: what the receiver makes of what arrived (an average, mutual learning, a mixing
  row, a fusion); work it returns runs in one phase after the exchange (Def-KT's fusion);
* :meth:`~PeerAlgorithm.send_back`: right after a receiver's combination, what it returns to its sources through the
  ledger (:meth:`give_back`: a lost return restores the source); default: nothing;
* :meth:`~PeerAlgorithm.round_result`: the round's :class:`RoundResult`.

Receivers run one after the other, exchange, combine and send back each, so every transfer of the round keeps one
order (the fault stream draws a link at its first use).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from lit_fl.algorithms.base import Algorithm, RoundResult, nanmean, phase_losses

if TYPE_CHECKING:
    from torch import Tensor, nn

    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.phase import ClientWork
    from lit_fl.steps.runner import StepRunner

__all__ = ["PeerAlgorithm", "PeerRound"]


@dataclass
class PeerRound:
    """One round of a decentralized method: drawn by :meth:`PeerAlgorithm.plan`, filled in as the round runs."""

    round: int
    #: the clients of the client phase, in order
    trainees: list[Client]
    #: every receiver and the clients it receives from, in exchange order
    incoming: list[tuple[Client, list[Client]]]
    #: the method's draw (the aggregator's :class:`~lit_fl.federation.selection.Participants`, the pairs, the peers)
    draw: Any = None
    #: receiver id -> the sources whose transfer arrived (:meth:`PeerAlgorithm.exchange`)
    arrived: dict[int, list[Client]] = field(default_factory=dict)
    #: the client phase's losses (NaN for a trainee without work)
    losses: list[float] = field(default_factory=list)
    #: the losses of the work :meth:`PeerAlgorithm.combine` returned (none: empty)
    combine_losses: list[float] = field(default_factory=list)
    #: the round's extra metrics, as the hooks add them
    extra: dict[str, float] = field(default_factory=dict)
    #: the method's own values of the round (snapshots, mixing weights, decisions)
    state: dict[str, Any] = field(default_factory=dict)


class PeerAlgorithm(Algorithm):
    """Base of the serverless methods (not registered): the round of the module docstring and the transport."""

    #: adapt-then-combine (the trainees train, then their trained models travel) or, False, combine-then-adapt
    trains_first: ClassVar[bool] = True

    def run_round(
        self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger
    ) -> RoundResult:
        plan = self.plan(round_, federation, runner, ledger)
        if self.trains_first:
            plan.losses = self.client_phase(plan, federation, runner)
        works: list[ClientWork | None] = []
        for receiver, sources in plan.incoming:
            arrived = plan.arrived[receiver.id] = self.exchange(receiver, sources, plan, federation, ledger)
            works.append(self.combine(receiver, arrived, plan, federation, runner, ledger))
            self.send_back(receiver, plan, federation, ledger)
        if any(work is not None for work in works):
            plan.combine_losses = phase_losses(runner.run_phase(works))
        if not self.trains_first:
            plan.losses = self.client_phase(plan, federation, runner)
        return self.round_result(plan, federation)

    # -- the hooks -----------------------------------------------------------------------------------------

    def plan(self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger) -> PeerRound:
        """The round's draw: its trainees and every receiver's sources."""
        raise NotImplementedError(f"{self.name} must define plan")

    def client_work(self, client: Client, plan: PeerRound, federation: Federation) -> ClientWork | None:
        """What a trainee does in the client phase (default: :meth:`local_work`)."""
        return self.local_work(client, federation)

    def client_phase(self, plan: PeerRound, federation: Federation, runner: StepRunner) -> list[float]:
        """Every trainee's :meth:`client_work` as one phase; their mean losses (NaN for a trainee without work)."""
        return phase_losses(runner.run_phase([self.client_work(c, plan, federation) for c in plan.trainees]))

    def outgoing(self, source: Client, receiver: Client, plan: PeerRound) -> nn.Module:
        """What ``source`` transmits to ``receiver`` (recorded in the ledger): its regular model by default."""
        return source.model

    def exchange(self, receiver: Client, sources: Sequence[Client], plan: PeerRound, federation: Federation,
                 ledger: CommunicationLedger) -> list[Client]:
        """Every source sends its :meth:`outgoing` to ``receiver``; the sources whose transfer arrived."""
        return self.send(federation, ledger, receiver, sources, [self.outgoing(s, receiver, plan) for s in sources])

    def combine(self, receiver: Client, arrived: list[Client], plan: PeerRound, federation: Federation,
                runner: StepRunner, ledger: CommunicationLedger) -> ClientWork | None:
        """What ``receiver`` makes of the transfers that ``arrived``; work it returns runs in one phase after the
        exchange (``plan.combine_losses``). Default: nothing."""
        return None

    def send_back(self, receiver: Client, plan: PeerRound, federation: Federation,
                  ledger: CommunicationLedger) -> None:
        """What ``receiver`` returns to its sources right after :meth:`combine` (:meth:`give_back`). Default: none."""

    def round_result(self, plan: PeerRound, federation: Federation) -> RoundResult:
        """The round's result (default: the trainees' mean loss and the hooks' metrics)."""
        return RoundResult(train_loss=nanmean(plan.losses), extra=plan.extra)

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
        place). A lost return (``faults.return_drop_prob``, or an end that left mid-round) still costs traffic;
        that receiver's model is restored from ``before`` (its weights before the aggregator touched them) with
        ``restore`` (default: ``Client.set_weights`` of the regular model). Returns the receivers that got their
        model back."""
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
        """The clients' current weights (or those of ``models``), kept only when returns can be lost (a fault,
        ``faults.return_drop_prob``, or a client that leaves mid-round on the virtual clock; restored by
        :meth:`give_back`)."""
        leaving = federation.system_config is not None and federation.system_config.availability_trace is not None
        if federation.faults.return_drop_prob <= 0 and not leaving:
            return {}
        models = models if models is not None else [c.model for c in clients]
        return {c.id: {k: v.detach().clone() for k, v in m.state_dict().items()} for c, m in zip(clients, models)}


def snapshot_states(federation: Federation) -> dict[int, dict[str, Tensor]]:
    """Every client's weights at this point of the round (detached copies), so that models replaced or averaged
    later in the round are never read by a later client (no chaining)."""
    return {c.id: {k: v.detach().clone() for k, v in c.model.state_dict().items()} for c in federation.clients}
