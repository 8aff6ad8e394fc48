"""Asynchronous server methods on the virtual clock (docs/system.md): clients train from whatever model the server
had when they started, and their updates arrive in the order their systems finish them.

A lit-fl round of an asynchronous method is one server step:

1. take the ``buffer_size`` in-flight updates that arrive first on the clock (FedAsync: 1; FedBuff: K);
2. apply them, each weighted by its staleness ``tau = version_now - version_started`` (:meth:`apply`);
3. start as many idle clients as arrived, at the moment the last of them arrived: each downloads the new model,
   trains (one client phase: they fuse like any phase), and is in flight until ``now + download + training +
   upload`` (its rate and link, :mod:`lit_fl.system.clock`).

A client whose availability window ends before its update would arrive leaves: its update never arrives. The
server notices at the first step after it left, which takes it with the arrivals and refills its slot.

The in-flight updates (client, version, arrival time, upload) are the method's state: checkpointed, so a stopped and
resumed run continues the same event sequence. The round's virtual time is the step's last arrival minus the
previous step's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from lit_fl.algorithms.base import RoundResult, nanmean, phase_losses
from lit_fl.algorithms.requirements import ONE_ARCHITECTURE
from lit_fl.algorithms.server import GLOBAL, ServerAlgorithm
from lit_fl.errors import ConfigError
from lit_fl.federation.endpoints import SERVER

if TYPE_CHECKING:
    from torch import Tensor

    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.runner import StepRunner

__all__ = ["AsyncServerAlgorithm", "InFlight", "Staleness", "staleness_weight"]

#: FedAsync's staleness functions (Xie, Koyejo, Gupta 2019, sec. 5.2)
Staleness = Literal["constant", "polynomial", "hinge"]


def staleness_weight(tau: int, kind: Staleness, a: float, b: float) -> float:
    """``s(tau)``: ``constant`` 1; ``polynomial`` ``(tau + 1)^-a``; ``hinge`` 1 up to ``b``, then
    ``1 / (a (tau - b) + 1)``."""
    if kind == "polynomial":
        return (tau + 1) ** -a
    if kind == "hinge":
        return 1.0 if tau <= b else 1.0 / (a * (tau - b) + 1)
    return 1.0


@dataclass
class InFlight:
    """An update on its way: its client, the server version it started from, when it arrives, what it uploads
    (the method's :meth:`AsyncServerAlgorithm.upload`) and its weight ``n_k``; ``left``: its client leaves before it
    would arrive (its availability window ends), so it never does, and ``arrives_s`` is when the client left."""

    client: int
    version: int
    arrives_s: float
    upload: dict[str, Tensor]
    weight: float
    left: bool = False

    def state_dict(self) -> dict[str, Any]:
        return {"client": self.client, "version": self.version, "arrives_s": self.arrives_s, "upload": self.upload,
                "weight": self.weight, "left": self.left}


class AsyncServerAlgorithm(ServerAlgorithm):
    """Base of FedAsync and FedBuff (not registered): the round of the module docstring. Needs ``system.clock``.

    Subclasses set :attr:`buffer_size` and define :meth:`upload` and :meth:`apply`."""

    requires = (*ServerAlgorithm.requires, ONE_ARCHITECTURE)
    #: updates arrive across rounds: no round deadline; the method times its clients and their departures itself
    asynchronous = True
    #: how many arrivals one server step takes
    buffer_size: int = 1
    #: how many clients train at once (at most the clients)
    concurrency: int = 10

    def setup(self, federation: Federation) -> None:
        super().setup(federation)
        if federation.systems is None:
            raise ConfigError(f"system.clock: {self.name} is asynchronous: its updates arrive on the virtual clock; "
                              "give system.clock true (docs/system.md)")
        self.version = 0
        self.in_flight: list[InFlight] = []

    # -- the round -----------------------------------------------------------------------------------------

    def run_round(self, round_: int, federation: Federation, runner: StepRunner,
                  ledger: CommunicationLedger) -> RoundResult:
        start = federation.virtual_s
        losses: list[float] = []
        if not self.in_flight:  # the run's start (or every update was lost): fill the pipeline
            losses = self.dispatch(min(self.concurrency, federation.num_clients), start, federation, runner, ledger)
        arrived = self.next_arrivals()
        taken = {id(u) for u in arrived}
        self.in_flight = [u for u in self.in_flight if id(u) not in taken]
        now = max((u.arrives_s for u in arrived), default=start)
        server = federation.server[GLOBAL]
        # a client that left sends nothing; a failed upload arrives as nothing
        used = [u for u in arrived if not u.left and ledger.send(u.client, SERVER, server)]
        staleness = [self.version - u.version for u in used]
        extra = self.apply(used, staleness, federation) if used else {}
        self.version += 1 if used else 0
        ledger.cutoff_s = now - start
        losses += self.dispatch(len(arrived), now, federation, runner, ledger)
        mean_staleness = sum(staleness) / len(staleness) if staleness else math.nan
        left = {"left_clients": float(sum(u.left for u in arrived))} if federation.system_config is not None \
            and federation.system_config.availability_trace is not None else {}
        return RoundResult(senders=tuple(u.client for u in used), train_loss=nanmean(losses),
                           extra={**extra, "mean_staleness": mean_staleness, **left})

    def next_arrivals(self) -> list[InFlight]:
        """The in-flight updates this step takes, in the order they arrive: the first :attr:`buffer_size` that
        arrive, with the departures (clients that left) before them; the server refills every slot they held."""
        taken: list[InFlight] = []
        arrivals = 0
        for update in sorted(self.in_flight, key=lambda u: (u.arrives_s, u.client)):
            if arrivals == self.buffer_size:
                break
            taken.append(update)
            arrivals += not update.left
        return taken

    def dispatch(self, count: int, now: float, federation: Federation, runner: StepRunner,
                 ledger: CommunicationLedger) -> list[float]:
        """Start ``count`` idle clients (there at ``now``) from the current server model: one client phase; each is
        in flight until it would arrive. Their losses."""
        from lit_fl.federation.ledger import model_megabytes
        from lit_fl.system.clock import round_trip_s

        assert federation.systems is not None
        busy = {u.client for u in self.in_flight}
        idle = [c for c in range(federation.num_clients)
                if c not in busy and federation.systems[c].available(now)]
        if not idle or count <= 0:
            return []
        chosen = sorted(int(idle[i]) for i in federation.rng.selection.choice(len(idle), size=min(count, len(idle)),
                                                                              replace=False))
        server = federation.server[GLOBAL]
        start = {k: v.detach().clone() for k, v in server.state_dict().items()}
        clients: list[Client] = []
        works = []
        for c in chosen:
            client = federation.clients[c]
            if not ledger.give_back(SERVER, c, server):  # the download was lost: the client stays idle
                continue
            client.set_weights(start)
            clients.append(client)
            works.append(self.local_work(client, federation))
        results = runner.run_phase(works)
        mb = model_megabytes(server)
        for client, work in zip(clients, works):
            if work is None:
                continue
            system = federation.systems[client.id]
            params = sum(p.numel() for p in client.model.parameters()) / 1e6
            seconds = round_trip_s(system, mb, self.local_epochs * client.num_train * params)
            leaves = system.leaves(now)
            left = now + seconds > leaves
            self.in_flight.append(InFlight(client.id, self.version, leaves if left else now + seconds,
                                           self.upload(client, start), float(client.num_train), left))
        return phase_losses(results)

    # -- the method's hooks --------------------------------------------------------------------------------

    def upload(self, client: Client, start: dict[str, Tensor]) -> dict[str, Tensor]:
        """What ``client`` sends after training from ``start`` (default: its model delta)."""
        return {k: (v.detach() - start[k]).clone() for k, v in client.model.state_dict().items()
                if v.is_floating_point()}

    def apply(self, updates: list[InFlight], staleness: list[int], federation: Federation) -> dict[str, float]:
        """Change the server model with ``updates`` (their staleness in ``staleness``); the step's metrics."""
        raise NotImplementedError

    def server_update(self, updates: Any, federation: Federation, runner: StepRunner) -> dict[str, float]:
        raise NotImplementedError(f"{self.name} applies its updates as they arrive (apply)")

    # -- state ---------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"version": self.version, "in_flight": [u.state_dict() for u in self.in_flight]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.version = int(state["version"])
        self.in_flight = [InFlight(int(u["client"]), int(u["version"]), float(u["arrives_s"]), dict(u["upload"]),
                                   float(u["weight"]), bool(u.get("left", False))) for u in state["in_flight"]]

