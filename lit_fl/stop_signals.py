"""Stop requests from outside: Ctrl-C (SIGINT), SIGTERM (SLURM, ``timeout``, ``docker stop``, Kubernetes), SIGUSR1
(SLURM's ``--signal``) and SIGHUP (a closed terminal), from the first instruction of a command to its exit.

``lit-fl`` handles them for the whole command (:func:`handled`): the first one is recorded (:func:`requested`) and
the command stops at its next safe point (``fit`` after the running round, with a checkpoint; before the first round
if it comes earlier; ``sweep`` stops its runs); a second one raises ``KeyboardInterrupt``, which aborts at once and
which the CLI turns into one line and exit status 130.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: Signals that ask a command to stop at its next safe point.
STOP_SIGNALS: tuple[int, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGUSR1", "SIGHUP") if hasattr(signal, name)
)

_received: list[str] = []  # the name of the first stop signal of the running command, if any


def requested() -> str | None:
    """The first stop signal the running command received (``SIGTERM``, ...), or None."""
    return _received[0] if _received else None


def request(name: str) -> None:
    """Record a stop request (the first one counts)."""
    if not _received:
        _received.append(name)


def _handle(signum: int, frame: Any) -> None:
    if _received:  # a second signal: abort now
        raise KeyboardInterrupt
    request(signal.Signals(signum).name)


@contextmanager
def handled() -> Iterator[None]:
    """Record stop signals for the block (main thread only; elsewhere the block runs unchanged); the previous
    handlers come back afterwards, and a request does not outlive the block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()
    previous = {signum: signal.signal(signum, _handle) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _received.clear()
