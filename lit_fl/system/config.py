"""The ``system`` config section: how fast each client computes, how fast its link is, when it is there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from lit_fl.constraints import Bounds, NonNegativeFloat, PositiveFloat, check_fields

#: how the clients' compute rates are drawn
SpeedDistribution = Literal["constant", "lognormal", "zipf"]
#: Zipf's exponent must exceed 1 (a proper distribution)
ZipfExponent = Annotated[float, Bounds(1, low_open=True)]


@dataclass(frozen=True)
class SystemConfig:
    """Client systems and the virtual clock (docs/system.md).

    Args:
        clock: charge every round virtual time (``virtual_s`` in metrics.csv): each client's compute from the work it
            did, its transfers from the bytes the ledger counts, over its link.
        speed: how compute rates are drawn, once per client from the run's seed: ``constant`` (every client
            ``speed_scale``), ``lognormal`` (median ``speed_scale``, log-deviation ``speed_sigma``: FedScale's and
            Plato's heavy-tailed devices) or ``zipf`` (``speed_scale`` divided by a Zipf(``speed_zipf_a``) slowdown:
            most clients fast, a few very slow).
        speed_scale: samples per second a client trains on a model of one million parameters (a model of P million
            parameters takes P times as long per sample).
        speed_sigma: the lognormal's sigma.
        speed_zipf_a: the Zipf exponent (> 1).
        upload_mbps: every client's upload bandwidth, megabits per second.
        download_mbps: every client's download bandwidth.
        latency_s: seconds added to every transfer.
        capacity_trace: a file of per-client capacities instead of the draws: FedScale's ``client_device_capacity``
            pickle (read by a restricted unpickler: plain data only) or lit-fl's JSON (docs/system.md).
        availability_trace: a file of per-client availability windows: FedScale's ``client_behave_trace`` pickle or
            lit-fl's JSON; without it every client is always there. A server method (and FedAsync, FedBuff)
            selects among the clients there at the round's start; one that leaves before its update arrives fails
            like a lost upload (``left_clients``). Methods that draw participants otherwise refuse it.
        deadline_s: a server method's round deadline (virtual seconds from the round's start): an update that
            arrives later is dropped (its traffic spent, the server unchanged by it); the round then lasts until
            the deadline.
        partial_work: under ``deadline_s``, a client that cannot finish its local work in time trains on as many of
            its batches as it can and sends that (FedProx's variable local work, for the methods that define it:
            ServerFedProx); without it a late update is dropped.
        over_selection: a server method selects ``(1 + over_selection)`` times its cohort and keeps the first
            ``cohort`` updates to arrive (FedScale's and Bonawitz et al.'s over-commitment); the others are dropped.
    """

    clock: bool = False
    speed: SpeedDistribution = "constant"
    speed_scale: PositiveFloat = 1000.0
    speed_sigma: NonNegativeFloat = 1.0
    speed_zipf_a: ZipfExponent = 1.5
    upload_mbps: PositiveFloat = 10.0
    download_mbps: PositiveFloat = 50.0
    latency_s: NonNegativeFloat = 0.05
    capacity_trace: str | None = None
    availability_trace: str | None = None
    deadline_s: PositiveFloat | None = None
    partial_work: bool = False
    over_selection: NonNegativeFloat = 0.0

    def __post_init__(self) -> None:
        check_fields(self, "system.")

    @property
    def policies(self) -> bool:
        """Whether the clock decides which updates a server uses (a deadline or over-selection)."""
        return self.deadline_s is not None or self.over_selection > 0
