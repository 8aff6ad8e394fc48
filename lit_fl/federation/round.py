"""The round contract between the round loop and a federated method: what a method must offer
(:class:`RoundAlgorithm`) and what a round reports (:class:`RoundResult`).

It lives with the loop, so that :mod:`lit_fl.federation` depends on no method: :class:`lit_fl.algorithms.Algorithm`
implements the contract, and ``from lit_fl.algorithms import RoundResult`` is this class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Federation
    from lit_fl.steps.runner import StepRunner


@dataclass
class RoundResult:
    """What happened in a round, for logs: who took part, the alpha used, the mean training loss.

    ``num_participants`` (logged as ``num_participants``) defaults to the aggregator plus the senders; a method
    where everyone takes part without an aggregator (gossip, Local, FedPer) says how many did.
    """

    aggregator: int | None = None
    senders: tuple[int, ...] = ()
    alpha: float = float("nan")
    train_loss: float = float("nan")
    num_participants: int | None = None
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def participants(self) -> int:
        """``num_participants``, or the aggregator plus the senders when the method did not say."""
        if self.num_participants is not None:
            return self.num_participants
        return len(self.senders) + (self.aggregator is not None)


class RoundAlgorithm(Protocol):
    """What the round loop and the checkpoints need of a method."""

    uses_peak_models: bool

    def run_round(
        self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger
    ) -> RoundResult: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...
