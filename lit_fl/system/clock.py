"""The virtual clock: a round's time from what its clients did, in the order they did it.

A round is a sequence of events, as the round recorded them: transfers (the ledger's: source, target, megabytes)
and work (the phase runner's: a client trained on samples worth so many million parameters). Every client has a
ready time, starting at the round's start:

* work by client c ends at ``ready[c] + sample_mparams / rate_c``;
* a transfer from s to t starts when both are ready and lasts ``latency + 8 MB / min(upload_s, download_t)`` (the
  server's side is never the bottleneck: it sends and receives in parallel, at the client's link);
* both ends are ready again when it ends.

The round's time is the latest ready time of a client that took part; a client's own time is its ready time. So a
server round is download, training and upload of its slowest client; an aggregator waits for the last model to
arrive before its mutual learning, and its returns follow. What is not charged: the server's own computation,
evaluation, and a client's time between rounds.

A client that leaves mid-round (its availability window ends) is a :class:`Departure`: the ledger records one when a
transfer to or from the client would end after it left (the transfer fails, :mod:`lit_fl.federation.ledger`), and
the client's time stops at its departure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lit_fl.system.profiles import ClientSystem

#: megabits per megabyte (the ledger's MB are 2^20 bytes; links are 10^6 bit/s)
MEGABITS_PER_MB = 8 * 1024 * 1024 / 1e6


@dataclass(frozen=True)
class Transfer:
    source: int
    target: int
    mb: float


@dataclass(frozen=True)
class Work:
    client: int
    sample_mparams: float


@dataclass(frozen=True)
class Departure:
    """Client ``client`` left ``at_s`` seconds into the round (its availability window ended)."""

    client: int
    at_s: float


Event = Transfer | Work | Departure


@dataclass(frozen=True)
class RoundTime:
    """A round on the clock: its seconds, and every client's time within it (clients that did nothing absent)."""

    seconds: float
    finished: dict[int, float]


def round_time(events: Sequence[Event], systems: Sequence[ClientSystem], server: int,
               cutoff_s: float | None = None) -> RoundTime:
    """Charge ``events`` (in order) to the clients' ``systems``; ``server`` is the server's endpoint id. With
    ``cutoff_s`` (the server stopped waiting then: a deadline, or the last update over-selection kept) the round
    lasts that long."""
    timeline = Timeline(systems, server)
    for event in events:
        timeline.add(event)
    ready = timeline.ready
    seconds = max(ready.values(), default=0.0) if cutoff_s is None else cutoff_s
    return RoundTime(seconds, ready)


class Timeline:
    """Every client's ready time as a round's events happen (the arithmetic of :func:`round_time`, one event at a
    time: the ledger keeps one to tell when a transfer would end)."""

    def __init__(self, systems: Sequence[ClientSystem], server: int) -> None:
        self.systems, self.server = systems, server
        self.ready: dict[int, float] = {}
        #: the clients that left, and when: their time stops there, whatever they are charged after
        self.gone: dict[int, float] = {}

    def add(self, event: Event) -> None:
        if isinstance(event, Work):
            self._set(event.client, self.ready.get(event.client, 0.0)
                      + self.systems[event.client].compute_s(event.sample_mparams))
        elif isinstance(event, Departure):
            self.gone[event.client] = min(self.gone.get(event.client, event.at_s), event.at_s)
            self._set(event.client, self.ready.get(event.client, 0.0))
        else:
            end = self.ends_at(event)
            for e in self.ends(event):
                self._set(e, end)

    def _set(self, client: int, ready: float) -> None:
        self.ready[client] = min(ready, self.gone.get(client, ready))

    def ends_at(self, transfer: Transfer) -> float:
        """When ``transfer`` would end: it starts when both its ends are ready."""
        start = max((self.ready.get(e, 0.0) for e in self.ends(transfer)), default=0.0)
        return start + transfer_s(transfer, self.systems, self.server)

    def ends(self, transfer: Transfer) -> list[int]:
        """The clients at either end of ``transfer`` (the server is never waited for)."""
        return [e for e in (transfer.source, transfer.target) if e != self.server]


def transfer_s(event: Transfer, systems: Sequence[ClientSystem], server: int) -> float:
    """Seconds of one transfer: latency plus its megabits over the slower of the sender's upload and the
    receiver's download (the server's link is never the slower)."""
    rates = []
    if event.source != server:
        rates.append(systems[event.source].upload_mbps)
    if event.target != server:
        rates.append(systems[event.target].download_mbps)
    latency = max([systems[e].latency_s for e in (event.source, event.target) if e != server], default=0.0)
    return latency + event.mb * MEGABITS_PER_MB / min(rates) if rates else 0.0


def round_trip_s(system: ClientSystem, mb: float, sample_mparams: float) -> float:
    """Seconds a client alone takes to download ``mb`` megabytes, train on ``sample_mparams`` and upload ``mb``: two
    latencies, the model over each direction of its link, and its compute (what :func:`round_time` charges a client
    whose round is only that)."""
    megabits = mb * MEGABITS_PER_MB
    return (2 * system.latency_s + megabits / system.download_mbps + megabits / system.upload_mbps
            + system.compute_s(sample_mparams))
