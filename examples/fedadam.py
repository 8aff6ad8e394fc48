"""FedAdam (Reddi et al. 2021, "Adaptive Federated Optimization", Algorithm 2), written as a method of your own on
lit-fl: ServerFedAvg's round (sampling, broadcast, local SGD, upload) with another server update. It is one small
class and no lit-fl file is edited; run it from this folder:

    lit-fl fit --config fedadam.yaml

(lit-fl's own ``ServerFedAvg`` has the same update built in as ``--algorithm.server_optimizer adam``: this file shows
how a server method that differs in its server update alone is written.) See docs/extending.md, "Server methods".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from lit_fl.algorithms import ServerFedAvg
from lit_fl.algorithms.updates import GLOBAL, ClientUpdate, average_updates
from lit_fl.constraints import Momentum, PositiveFloat


class FedAdamServer(ServerFedAvg):
    """FedAvg's clients, and a server that takes an Adam step on the mean client update ``Delta_t``:
    ``m = b1 m + (1 - b1) Delta``, ``v = b2 v + (1 - b2) Delta^2``, ``x += eta m / (sqrt(v) + tau)``, ``v`` from
    ``tau^2``, no bias correction (Algorithm 2).

    Args:
        eta: the server learning rate.
        beta1: ``m``'s decay.
        beta2: ``v``'s decay.
        tau: the adaptivity (Reddi et al.'s grid 1e-1 .. 1e-5).
        **kwargs: ServerFedAvg's keys (``client_fraction``, ``local_epochs``, ``lr``, ...).
    """

    def __init__(self, eta: PositiveFloat = 0.01, beta1: Momentum = 0.9, beta2: Momentum = 0.99,
                 tau: PositiveFloat = 1e-3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.eta, self.beta1, self.beta2, self.tau = eta, beta1, beta2, tau
        self.m: dict[str, torch.Tensor] = {}
        self.v: dict[str, torch.Tensor] = {}

    @torch.no_grad()
    def server_update(self, updates: Sequence[ClientUpdate], federation: Any, runner: Any) -> dict[str, float]:
        if not updates:  # every upload was lost: the server keeps its model
            return {}
        x = federation.server[GLOBAL]
        average = average_updates(updates)[GLOBAL]  # the sample-weighted mean of the arrived models
        for name, p in x.named_parameters():
            delta = average[name] - p
            m = self.m[name] = self.beta1 * self.m.get(name, torch.zeros_like(p)) + (1 - self.beta1) * delta
            v0 = self.v.get(name, torch.full_like(p, self.tau**2))
            v = self.v[name] = self.beta2 * v0 + (1 - self.beta2) * delta**2
            p.add_(self.eta * m / (v.sqrt() + self.tau))
        for name, buffer in x.named_buffers():  # BatchNorm statistics: the average's
            buffer.copy_(average[name])
        return {}

    def state_dict(self) -> dict[str, Any]:  # a resumed run continues with the same moments
        return {"m": dict(self.m), "v": dict(self.v)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.m, self.v = dict(state["m"]), dict(state["v"])
