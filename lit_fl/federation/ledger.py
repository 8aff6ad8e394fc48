"""Communication ledger: the one place models travel. It counts the megabytes of every transfer and applies the
configured client faults (``faults.*``), so every method, a user's included, fails the same way without code of its
own: a sender that fails sends nothing, a returned model can be lost on the way back. On the virtual clock with
availability windows (:class:`Leaving`), a client that leaves mid-round fails the same way: a transfer fails when a
client at either end leaves before it would end."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from torch import Tensor, nn

from lit_fl.federation.endpoints import SERVER
from lit_fl.federation.faults import FaultsConfig
from lit_fl.system.clock import Departure, Timeline, Transfer, Work

if TYPE_CHECKING:
    import numpy as np

    from lit_fl.federation.state import Federation
    from lit_fl.federation.topology import Topology
    from lit_fl.system.profiles import ClientSystem

MB = 1024 * 1024

_MEGABYTES: WeakKeyDictionary[nn.Module, float] = WeakKeyDictionary()


def model_megabytes(model: nn.Module) -> float:
    """Size of a model's parameters and buffers as sent over the wire (their in-memory bytes).

    Computed once per module: training and averaging change a model's values, never its tensors' shapes or
    dtypes (a method that sends part of a model sends a new module), and the walk over every tensor would
    otherwise run twice per participant per round."""
    megabytes = _MEGABYTES.get(model)
    if megabytes is None:
        tensors = [*model.parameters(), *model.buffers()]
        megabytes = _MEGABYTES[model] = sum(t.numel() * t.element_size() for t in tensors) / MB
    return megabytes


class Payload(nn.Module):
    """Tensors on the wire that are not a whole model (part of one: FedPer's ``g``, a Combo segment), as a module
    the ledger sizes like any model."""

    def __init__(self, tensors: Sequence[Tensor]) -> None:
        super().__init__()
        for i, tensor in enumerate(tensors):
            self.register_buffer(f"t{i}", tensor, persistent=False)


@dataclass
class RoundFaults:
    """Failures of one round, logged as ``dropped_senders`` and ``lost_returns``."""

    dropped_senders: int = 0
    lost_returns: int = 0

    def as_metrics(self) -> dict[str, float]:
        return {"dropped_senders": float(self.dropped_senders), "lost_returns": float(self.lost_returns)}


@dataclass(frozen=True)
class Leaving:
    """When the clients leave during a round (``system.availability_trace``): their ``systems``, the round's start on
    the virtual clock ``start_s``."""

    systems: Sequence[ClientSystem]
    start_s: float

    def after_s(self, client: int) -> float:
        """Seconds into the round at which ``client`` leaves (0 when it is not there at the start; inf: never)."""
        return self.systems[client].leaves(self.start_s) - self.start_s


@dataclass
class CommunicationLedger:
    """Per-round and cumulative traffic. ``sent`` = towards an aggregator, a peer or a server, ``returned`` = back.

    With ``faults`` (and the federation's fault stream ``rng``; :meth:`of` takes both from a federation) every
    transfer may fail: :meth:`send` returns False when the source failed before sending (``faults.drop_prob``:
    nothing travels), :meth:`give_back` returns False when the returned model is lost on the way
    (``faults.return_drop_prob``: it travelled, and is lost). A method uses a model only if its transfer returned
    True. Each source-target link fails at most once per round: :meth:`reaches` draws (or recalls) whether a source
    reaches a target before anything is sent, e.g. to leave a failed peer out of a computation first.
    :attr:`round_faults` counts the round's failures (the round loop logs them for every method).
    """

    total_mb: float = 0.0
    round_sent_mb: float = 0.0
    round_returned_mb: float = 0.0
    transfers: list[tuple[int, int, float]] = field(default_factory=list)
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    rng: np.random.Generator | None = None
    #: the network: a transfer between two clients crosses ``topology.hops`` links (and only one without
    #: ``topology.relay``: a send to a non-neighbour is refused)
    topology: Topology | None = None
    round_faults: RoundFaults = field(default_factory=RoundFaults)
    #: the round's transfers and client work in the order they happened (the virtual clock's input,
    #: :mod:`lit_fl.system.clock`); work is recorded only while a clock runs (:meth:`record_work`)
    events: list[Transfer | Work | Departure] = field(default_factory=list)
    #: when a server stopped waiting for updates this round (a deadline, over-selection's last kept update), in
    #: virtual seconds from the round's start; None: it waited for every one
    cutoff_s: float | None = None
    #: the clients that left this round before a transfer of theirs ended (:meth:`start_round`'s ``leaving``)
    departed: set[int] = field(default_factory=set)
    _links: dict[tuple[int, int], bool] = field(default_factory=dict, repr=False)
    _returns: dict[tuple[int, int], bool] = field(default_factory=dict, repr=False)
    _leaving: Leaving | None = field(default=None, repr=False)
    _timeline: Timeline | None = field(default=None, repr=False)

    @classmethod
    def of(cls, federation: Federation) -> CommunicationLedger:
        """A ledger applying ``federation``'s faults, drawn from its fault stream (restored on resume)."""
        return cls(faults=federation.faults, rng=federation.rng.faults, topology=federation.topology)

    def start_round(self, leaving: Leaving | None = None) -> None:
        """A new round. With ``leaving`` (clients with availability windows, on the virtual clock) a transfer fails
        when either of its clients leaves before it would end (:meth:`send`, :meth:`give_back`): a client that
        leaves mid-round fails like a fault."""
        self.round_sent_mb = self.round_returned_mb = 0.0
        self.transfers = []
        self.round_faults = RoundFaults()
        self._links, self._returns = {}, {}
        self.events = []
        self.cutoff_s = None
        self.departed = set()
        self._leaving = leaving
        self._timeline = Timeline(leaving.systems, SERVER) if leaving is not None else None

    @property
    def leaving(self) -> Leaving | None:
        """The round's departures' schedule (:meth:`start_round`), or None."""
        return self._leaving

    def reaches(self, source: int, target: int) -> bool:
        """Whether ``source`` reaches ``target`` this round (False: it fails before sending, ``faults.drop_prob``);
        drawn at the link's first use in the round, recalled after."""
        self.round_faults.dropped_senders += self._first_draw(self._links, (source, target), self.faults.drop_prob)
        return self._links[source, target]

    def returns(self, source: int, target: int) -> bool:
        """Whether a model returned from ``source`` to ``target`` this round arrives (``faults.return_drop_prob``);
        drawn at first use in the round, recalled after."""
        self.round_faults.lost_returns += self._first_draw(self._returns, (source, target),
                                                           self.faults.return_drop_prob)
        return self._returns[source, target]

    def _first_draw(self, arrives: dict[tuple[int, int], bool], link: tuple[int, int], prob: float) -> int:
        """At ``link``'s first use this round: draw whether it fails (probability ``prob``) and keep in ``arrives``
        that it does not; 1 when it failed, else (and on every later use) 0."""
        if link in arrives:
            return 0
        failed = self._fails(prob)
        arrives[link] = not failed
        return int(failed)

    def send(self, source: int, target: int, model: nn.Module, hops: int | None = None) -> bool:
        """``model`` travels from ``source`` to ``target`` over ``hops`` links (every link carries it once; default:
        the topology's shortest path, one link between neighbours or to and from the :data:`SERVER`); False, and
        nothing travels, when the source failed (:meth:`reaches`)."""
        hops = self.links(source, target, hops)
        if not self.reaches(source, target):
            return False
        leaving = self._departing(source, target, model, hops)
        if leaving:  # a client left before the model arrived: nothing counts as sent
            self._depart(leaving)
            return False
        self._record(source, target, model, hops, returned=False)
        return True

    def give_back(self, source: int, target: int, model: nn.Module, hops: int | None = None) -> bool:
        """``model`` travels back from ``source`` to ``target``; False when it was lost on the way (:meth:`returns`):
        the traffic is spent, the target does not get it."""
        hops = self.links(source, target, hops)
        leaving = self._departing(source, target, model, hops)
        self._record(source, target, model, hops, returned=True)
        arrives = self.returns(source, target)  # drawn whether or not a client left: the fault stream is unchanged
        self._depart(leaving)
        return arrives and not leaving

    def links(self, source: int, target: int, hops: int | None = None) -> int:
        """The links a transfer crosses: ``hops`` when given, else the topology's (1 without a topology or for the
        :data:`SERVER`). Between two clients the topology must allow it (:meth:`Topology.hops` refuses a send to a
        non-neighbour without ``relay``)."""
        if self.topology is None or SERVER in (source, target):
            return 1 if hops is None else hops
        expected = self.topology.hops(source, target)
        return expected if hops is None else hops

    def _departing(self, source: int, target: int, model: nn.Module, hops: int) -> list[Departure]:
        """The clients of a transfer of ``model`` over ``hops`` links that leave before it would end (none without
        ``leaving``)."""
        if self._leaving is None or self._timeline is None:
            return []
        transfer = Transfer(source, target, model_megabytes(model) * hops)
        end = self._timeline.ends_at(transfer)
        leaves = {e: self._leaving.after_s(e) for e in self._timeline.ends(transfer)}
        return [Departure(e, at) for e, at in leaves.items() if at < end]

    def _depart(self, departures: list[Departure]) -> None:
        for departure in departures:
            self.departed.add(departure.client)
            self._event(departure)

    def _event(self, event: Transfer | Work | Departure) -> None:
        self.events.append(event)
        if self._timeline is not None:
            self._timeline.add(event)

    def _record(self, source: int, target: int, model: nn.Module, hops: int, returned: bool) -> None:
        mb = model_megabytes(model) * hops
        if returned:
            self.round_returned_mb += mb
        else:
            self.round_sent_mb += mb
        self.total_mb += mb
        self.transfers.append((source, target, mb))
        self._event(Transfer(source, target, mb))

    def record_work(self, client: int, sample_mparams: float) -> None:
        """``client`` trained on samples worth ``sample_mparams`` (samples times its models' millions of parameters);
        the phase runner calls it while the virtual clock runs."""
        self._event(Work(client, sample_mparams))

    def _fails(self, probability: float) -> bool:
        """One failure draw (no draw at all when the probability is 0, so faults off never move the stream)."""
        if probability <= 0:
            return False
        if self.rng is None:
            raise RuntimeError("faults are on but the ledger has no fault stream: build it with CommunicationLedger.of")
        return bool(self.rng.random() < probability)

    @property
    def round_mb(self) -> float:
        return self.round_sent_mb + self.round_returned_mb

    def state_dict(self) -> dict[str, float]:
        return {"total_mb": self.total_mb}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.total_mb = float(state["total_mb"])
