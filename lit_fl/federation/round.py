"""The round contract between the round loop and a federated method: what a method must offer
(:class:`RoundAlgorithm`) and what a round reports (:class:`RoundResult`).

It lives with the loop, so that :mod:`lit_fl.federation` depends on no method: :class:`lit_fl.algorithms.Algorithm`
implements the contract, and ``from lit_fl.algorithms import RoundResult`` is this class.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Federation
    from lit_fl.steps.runner import StepRunner


@dataclass
class RoundResult:
    """What happened in a round, for logs: who took part, the alpha used, the mean training loss.

    ``num_participants`` (logged as ``num_participants``) defaults to the distinct clients among the aggregator,
    the senders and both ends of every transfer of the round (:meth:`participants`), so a gossip round in which
    every client sent to its neighbours counts every client; a method whose clients take part without sending
    (Local) says how many did.
    """

    aggregator: int | None = None
    senders: tuple[int, ...] = ()
    alpha: float = float("nan")
    train_loss: float = float("nan")
    num_participants: int | None = None
    extra: dict[str, float] = field(default_factory=dict)

    def with_extra(self, extra: dict[str, float]) -> RoundResult:
        """This result with ``extra``'s metrics added (a later step of the round reports more)."""
        return replace(self, extra={**self.extra, **extra})

    def participants(self, transfers: Iterable[tuple[int, int, float]] = ()) -> int:
        """``num_participants``, or when the method did not say: the distinct clients among the aggregator, the
        senders and the ends of ``transfers`` (the ledger's ``(source, target, MB)`` of the round; the server,
        ``-1``, is not a client)."""
        if self.num_participants is not None:
            return self.num_participants
        clients = {*self.senders, *(() if self.aggregator is None else (self.aggregator,))}
        clients.update(end for source, target, _ in transfers for end in (source, target))
        return len({c for c in clients if c >= 0})


class RoundAlgorithm(Protocol):
    """What the round loop and the checkpoints need of a method."""

    uses_peak_models: bool

    def run_round(
        self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger
    ) -> RoundResult: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...
