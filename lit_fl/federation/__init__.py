"""The federation: client state, round loop (``federation.loop``), selection, alpha schedule, evaluation,
ledger, checkpoints. The package imports lazily (:mod:`lit_fl.lazy`): the config classes of its light modules
(``topology``, ``faults``) load without torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lit_fl.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "AlphaSchedule": "lit_fl.federation.alpha",
    "Client": "lit_fl.federation.state",
    "CommunicationLedger": "lit_fl.federation.ledger",
    "Evaluator": "lit_fl.federation.evaluation",
    "Federation": "lit_fl.federation.state",
    "Participants": "lit_fl.federation.selection",
    "select_participants": "lit_fl.federation.selection",
}
__all__ = [
    "AlphaSchedule",
    "Client",
    "CommunicationLedger",
    "Evaluator",
    "Federation",
    "Participants",
    "select_participants",
]

if TYPE_CHECKING:
    from lit_fl.federation.alpha import AlphaSchedule
    from lit_fl.federation.evaluation import Evaluator
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.selection import Participants, select_participants
    from lit_fl.federation.state import Client, Federation

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
