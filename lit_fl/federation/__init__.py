"""The federation: client state, round loop (``federation.loop``), selection, alpha schedule, evaluation,
ledger, checkpoints. The package imports lazily (:mod:`lit_fl.lazy`): the config classes of its light modules
(``topology``, ``faults``) load without torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lit_fl.lazy import lazy_exports

if TYPE_CHECKING:
    from lit_fl.federation.alpha import AlphaSchedule
    from lit_fl.federation.evaluation import Evaluator
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.selection import Participants, select_participants
    from lit_fl.federation.state import Client, Federation

__getattr__, __dir__, __all__ = lazy_exports(globals())
