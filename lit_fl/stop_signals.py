"""Stop requests from outside: Ctrl-C (SIGINT), SIGTERM (SLURM, ``timeout``, ``docker stop``, Kubernetes), SIGUSR1
(SLURM's ``--signal``) and SIGHUP (a closed terminal), from the first instruction of a command to its exit.

``lit-fl`` handles them for the whole command (:func:`handled`). Inside a block that has safe points
(:func:`safe_points`: ``fit``'s run, a sweep's runs) the first one is recorded (:func:`requested`) and the command
stops at its next safe point (a run after its running round, with a checkpoint, or before its first round if that
comes earlier; ``sweep`` stops its runs); a second one raises ``KeyboardInterrupt``, which aborts at once and which
the CLI turns into one line and exit status 130. Anywhere else (reading a config, ``compare``, a sweep's planning,
a dry run: work that writes its files atomically and has nothing to save) the first one ends the command at once:
:class:`Stopped`, one line and the shell's status for the signal, ``128 + signum`` (130 for Ctrl-C, 143 for
SIGTERM), or 75 for ``fit`` (:data:`lit_fl.cli.STOPPED_BEFORE_THE_WORK`: nothing was written, run it again).
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
_safe_points: list[bool] = [False]  # whether the running block stops at safe points (the innermost block's say)


class Stopped(KeyboardInterrupt):
    """A stop signal that ended a command without safe points at once: ``name`` (``SIGTERM``) and the exit
    ``status`` a shell gives that signal (``128 + signum``)."""

    def __init__(self, signum: int) -> None:
        self.name = signal.Signals(signum).name
        self.status = 128 + signum
        super().__init__(self.name)


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
    if not _safe_points[-1]:  # nothing to finish or save: end now
        raise Stopped(signum)
    request(signal.Signals(signum).name)


@contextmanager
def safe_points() -> Iterator[None]:
    """The block stops at its own safe points: a stop signal within it is recorded (:func:`requested`) for the block
    to act on, never raised."""
    _safe_points.append(True)
    try:
        yield
    finally:
        _safe_points.pop()


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
