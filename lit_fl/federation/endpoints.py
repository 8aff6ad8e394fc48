"""The ledger's endpoints that are not clients (:mod:`lit_fl.federation.ledger`), importable without torch."""

from __future__ import annotations

from typing import Final

#: The server's endpoint in the ledger (a transfer to or from a server method's server): not a client id, never a
#: topology node, one link away from every client.
SERVER: Final[int] = -1
