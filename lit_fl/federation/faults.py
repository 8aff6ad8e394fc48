"""Client faults: a sender that fails before sending, a returned model that is lost on the way back. The
:class:`~lit_fl.federation.ledger.CommunicationLedger` draws and applies them to every transfer."""

from __future__ import annotations

from dataclasses import dataclass

from lit_fl.constraints import UnitInterval, check_fields


@dataclass
class FaultsConfig:
    """Simulated failures, drawn from their own seeded stream (so resumed runs fail identically).

    Args:
        drop_prob: probability that a selected sender fails before sending; the round goes on without it
            (it keeps its locally trained model).
        return_drop_prob: probability that the model sent back to a sender is lost; the sender keeps its
            locally trained model (and gets no peak update).
    """

    drop_prob: UnitInterval = 0.0
    return_drop_prob: UnitInterval = 0.0

    def __post_init__(self) -> None:
        check_fields(self, "faults.")

    @property
    def enabled(self) -> bool:
        return self.drop_prob > 0 or self.return_drop_prob > 0
