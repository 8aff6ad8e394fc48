"""FedAsync (Xie, Koyejo, Gupta, 2019, "Asynchronous Federated Optimization", Algorithm 1) on the virtual clock.

Clients train from the server model of the moment they start; each update is applied as it arrives:

    alpha_t = alpha * s(t - tau)                     (tau: the server version the client started from)
    x_t     = (1 - alpha_t) x_{t-1} + alpha_t x_new  (x_new: the client's trained model)

with the staleness function ``s`` constant, polynomial ``(t - tau + 1)^-a`` or hinge (1 up to ``b``, then
``1 / (a (t - tau - b) + 1)``) (sec. 5.2). One lit-fl round is one update
(:class:`~lit_fl.algorithms.async_server.AsyncServerAlgorithm`).

Defaults, the paper's where it gives them (sec. 6): alpha 0.6 (its grid: 0.6, 0.8, 0.9), the polynomial staleness
with a = 0.5; concurrency (clients training at once) is lit-fl's choice: 10.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lit_fl.algorithms.async_server import AsyncServerAlgorithm, InFlight, Staleness, staleness_weight
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.server import GLOBAL
from lit_fl.algorithms.settings import FEDORION_CLIENTS
from lit_fl.constraints import Fraction, NonNegativeFloat, PositiveInt

if TYPE_CHECKING:
    from torch import Tensor

    from lit_fl.federation.state import Client, Federation


@register_algorithm
class FedAsync(AsyncServerAlgorithm):
    """FedAsync: every arriving model mixed into the server's, weighted by its staleness. Needs ``system.clock``.

    Args:
        alpha: the mixing weight alpha (Xie et al.: 0.6).
        staleness: ``constant``, ``polynomial`` or ``hinge`` (sec. 5.2).
        staleness_a: the polynomial's exponent, or the hinge's slope (Xie et al.: 0.5; hinge: 10).
        staleness_b: the hinge's knee (Xie et al.: 4).
        concurrency: clients training at once (lit-fl's choice: 10; at most the clients).
    """

    client_defaults = FEDORION_CLIENTS

    def __init__(self, alpha: Fraction = 0.6, staleness: Staleness = "polynomial", staleness_a: NonNegativeFloat = 0.5,
                 staleness_b: NonNegativeFloat = 4.0, concurrency: PositiveInt = 10, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.alpha, self.staleness, self.staleness_a, self.staleness_b = alpha, staleness, staleness_a, staleness_b
        self.concurrency, self.buffer_size = concurrency, 1

    def upload(self, client: Client, start: dict[str, Tensor]) -> dict[str, Tensor]:
        """FedAsync sends the trained model itself."""
        return {k: v.detach().clone() for k, v in client.model.state_dict().items() if v.is_floating_point()}

    def apply(self, updates: list[InFlight], staleness: list[int], federation: Federation) -> dict[str, float]:
        (update,), (tau,) = updates, staleness
        alpha_t = self.alpha * staleness_weight(tau, self.staleness, self.staleness_a, self.staleness_b)
        import torch

        server = federation.server[GLOBAL].state_dict()
        with torch.no_grad():
            for key, value in update.upload.items():
                server[key].mul_(1 - alpha_t).add_(value.to(server[key].device), alpha=alpha_t)
        return {"alpha_t": alpha_t}
