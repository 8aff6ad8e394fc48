"""FedBuff (Nguyen, Malik, Zhan, Yousefpour, Rabbat, Malek, Huba, 2022, "Federated Learning with Buffered
Asynchronous Aggregation", Algorithm 1) on the virtual clock.

Clients train from the server model of the moment they start and send their model delta; the server buffers the
first K to arrive, each weighted by its staleness, then steps:

    Delta_bar = (1 / K) sum_i s(tau_i) Delta_i,   s(tau) = 1 / sqrt(1 + tau)
    x         = x + eta_g Delta_bar

One lit-fl round is one server step (:class:`~lit_fl.algorithms.async_server.AsyncServerAlgorithm`). An upload lost
on the way leaves the buffer shorter: the mean is over the deltas that arrived.

Defaults: buffer K = 10 and concurrency 100 are the paper's (sec. 5, its smaller-scale settings use K = 10); the
server learning rate 1.0 (its SGD server step).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from lit_fl.algorithms.async_server import AsyncServerAlgorithm, InFlight
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.server import GLOBAL
from lit_fl.algorithms.settings import FEDORION_CLIENTS
from lit_fl.constraints import PositiveFloat, PositiveInt

if TYPE_CHECKING:
    from lit_fl.federation.state import Federation


def fedbuff_staleness(tau: int) -> float:
    """FedBuff's weight of an update ``tau`` server steps old: ``1 / sqrt(1 + tau)``."""
    return 1.0 / math.sqrt(1.0 + tau)


@register_algorithm
class FedBuff(AsyncServerAlgorithm):
    """FedBuff: the server steps on the staleness-weighted mean of every K deltas. Needs ``system.clock``.

    Args:
        buffer_size: K, the deltas a server step takes (Nguyen et al.: 10).
        concurrency: clients training at once (Nguyen et al.: 100; at most the clients).
        server_lr: eta_g, the server's step on the buffered mean (1.0).
    """

    client_defaults = FEDORION_CLIENTS

    def __init__(self, buffer_size: PositiveInt = 10, concurrency: PositiveInt = 100, server_lr: PositiveFloat = 1.0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.buffer_size, self.concurrency, self.server_lr = buffer_size, concurrency, server_lr

    def apply(self, updates: list[InFlight], staleness: list[int], federation: Federation) -> dict[str, float]:
        weights = [fedbuff_staleness(tau) for tau in staleness]
        import torch

        server = federation.server[GLOBAL].state_dict()
        with torch.no_grad():
            for key in updates[0].upload:
                mean = sum(w * u.upload[key].to(server[key].device, torch.float64)
                           for w, u in zip(weights, updates)) / len(updates)
                server[key].add_((self.server_lr * mean).to(server[key].dtype))
        return {"mean_staleness_weight": sum(weights) / len(weights)}
